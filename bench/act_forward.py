"""Why one greedy action costs what it does: the batch-1 forward of the study's network
at the default floor, layer by layer, with the kernel torch picks for each, its FLOPs and
the bytes of weights it must read; and the acting path's own overhead (tensor
construction, scaling, argmax) against a preallocated-input variant with the same bits.

After annealing, 9 steps in 10 need this forward, so it sets how close the training loop
can come to the updates-alone bound (bench/train_throughput.py).

    .venv/bin/python bench/act_forward.py [--seconds 3] [--threads 1]
"""

from __future__ import annotations

import argparse

import common
import numpy as np
import torch
from torch.profiler import profile

from reprodqn.determinism import numerics
from reprodqn.dqn.network import build_q_network

KERNELS = (
    "aten::mkldnn_convolution",
    "aten::mkldnn_linear",
    "aten::_slow_conv2d_forward",
    "aten::addmm",
    "aten::mm",
)


def multiply_adds(layer, out: torch.Tensor) -> int:
    """FLOPs of a convolution or linear layer, 2 per multiply-add (counted from the shapes:
    torch's FlopCounterMode does not count the oneDNN ops the network calls)."""
    weight = getattr(layer, "weight", None)
    return 0 if weight is None else 2 * out.numel() * weight[0].numel()


def kernel_of(layer, x) -> str:
    with profile() as prof:
        layer(x)
    names = {event.key for event in prof.key_averages()}
    found = [k.removeprefix("aten::") for k in KERNELS if k in names]
    return ", ".join(found) or "elementwise"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    numerics.configure("cpu", args.threads, True)
    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(0)).eval()
    state = np.random.default_rng(0).integers(0, 256, (4, 84, 84), dtype=np.uint8)

    def act() -> int:  # DQNAgent.greedy_action's code
        with torch.inference_mode():
            return int(net(torch.from_numpy(state).unsqueeze(0)).argmax(dim=1).item())

    buffer = torch.empty((1, 4, 84, 84), dtype=torch.float32)

    def act_preallocated() -> int:  # one input buffer, layers called directly
        with torch.inference_mode():
            buffer.copy_(torch.from_numpy(state)).div_(255.0)
            x = buffer
            for layer in net.layers:
                x = layer(x)
            return int(x.argmax(dim=1).item())

    assert act() == act_preallocated()
    with torch.inference_mode():
        a = net(torch.from_numpy(state).unsqueeze(0))
        x = torch.from_numpy(state).unsqueeze(0).float().div_(255.0)
        for layer in net.layers:
            x = layer(x)
        same_bits = torch.equal(a, x)

    print(
        f"batch-1 greedy forward, Nature network, {torch.get_num_threads()} thread(s), "
        f"{torch.backends.cpu.get_cpu_capability()}"
    )
    print(
        f"{'layer':28} {'kernel':22} {'ms':>7} {'MFLOP':>7} {'GFLOP/s':>8} "
        f"{'weights':>8} {'GB/s':>6}"
    )
    rows, total = [], 0.0
    with torch.inference_mode():
        x = torch.from_numpy(state).unsqueeze(0).float().div_(255.0)
        for index, layer in enumerate(net.layers):
            ms = 1e3 * common.per_call_seconds(lambda layer=layer, x=x: layer(x), args.seconds / 4)
            flops = multiply_adds(layer, layer(x))
            weights = sum(p.numel() * p.element_size() for p in layer.parameters())
            name = f"{index} {type(layer).__name__} {tuple(x.shape[1:])}"
            rows.append((name, kernel_of(layer, x), ms, flops, weights))
            total += ms
            x = layer(x)
    for name, kernel, ms, flops, weights in rows:
        print(
            f"{name:28} {kernel:22} {ms:7.3f} {flops / 1e6:7.2f} "
            f"{flops / ms / 1e6 if flops else 0:8.1f} {weights / 2**20:7.2f}M "
            f"{weights / ms / 1e6 if weights else 0:6.1f}"
        )
    whole = 1e3 * common.per_call_seconds(act, args.seconds)
    pre = 1e3 * common.per_call_seconds(act_preallocated, args.seconds)
    print(f"{'layers alone':51} {total:7.3f}")
    print(
        f"{'greedy_action (as the agent acts)':51} {whole:7.3f}  (overhead beyond the "
        f"layers {whole - total:.3f} ms)"
    )
    print(
        f"{'preallocated input, layers called directly':51} {pre:7.3f}  speed-up "
        f"{whole / pre:.3f}; same action; same Q bits as the module call: {same_bits}"
    )


if __name__ == "__main__":
    common.run_main(main)
