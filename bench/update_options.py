"""One Q-learning update of the study's network (Nature, batch 32, RMSprop, float64
targets) at the default floor, taken apart: where its time goes, its FLOPs against the
machine's AVX2 FP32 peak, and what each speed option tried buys and whether it keeps the
bits.

Phases are timed with a synchronising clock around each part of `DQNAgent.update`'s own
code. FLOPs come from torch's FlopCounterMode (convolutions and matrix products; the
elementwise rest is memory-bound and not counted). The peak is 32 FP32 FLOP per cycle per
core (two 256-bit FMA pipes, as on Zen 2-5 and Intel since Haswell) at the clock the
kernel reports. Every option is timed against the baseline in alternating blocks (a drift
in machine speed hits all alike) and run on the same minibatches from the same start:
"same bits" means identical weights and optimizer state after every block.

    .venv/bin/python bench/update_options.py [--rounds 6] [--block 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from pathlib import Path

import common
import numpy as np
import torch
from batches import random_batches
from determinism_overhead import torch_dispatch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from reprodqn.determinism import numerics
from reprodqn.dqn.network import QNetwork


def core_mhz() -> float:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1])
    return float("nan")


# -- the options: each a context applied around an agent's updates -----------------------------


@contextlib.contextmanager
def forward_replaced(forward):
    """QNetwork.forward swapped for the duration (every network of the agent at once)."""
    original = QNetwork.forward
    QNetwork.forward = forward
    try:
        yield
    finally:
        QNetwork.forward = original


def with_layers(run_layers):
    """A QNetwork.forward whose `self.layers` part is run_layers(net, frames) instead; the
    dueling streams after it as they are."""

    def forward(self, frames):
        x = run_layers(self, frames)
        if not self.dueling:
            return x
        advantage = self.advantage(x)
        return self.value(x) + (advantage - advantage.mean(dim=1, keepdim=True))

    return forward


@contextlib.contextmanager
def out_of_place_scaling(agent):
    """Kept, shown reverted: x / 255 allocates a second 3.6 MB buffer per batch."""
    with forward_replaced(with_layers(lambda net, frames: net.layers(frames.float() / 255.0))):
        yield


@contextlib.contextmanager
def target_inference_mode(agent):
    """The target forward under inference_mode instead of no_grad (no version counters)."""
    original = agent.td_target

    def td_target(*args, **kwargs):
        with torch.inference_mode():
            targets = original(*args, **kwargs)
        return targets.clone()  # outside inference mode: an inference tensor can't be saved

    agent.td_target = td_target
    try:
        yield
    finally:
        del agent.td_target


@contextlib.contextmanager
def channels_last(agent):
    """Networks and inputs in NHWC, oneDNN's native layout."""
    for net in (agent.online, agent.target):
        net.to(memory_format=torch.channels_last)
    original = QNetwork.forward

    def forward(self, frames):
        return original(self, frames.contiguous(memory_format=torch.channels_last))

    with forward_replaced(forward):
        yield


@contextlib.contextmanager
def onednn_layout(agent):
    """The convolutions chained in oneDNN's own blocked layout (mkldnn tensors, relu in
    oneDNN too), made a plain tensor once before the flatten: the same kernels, fewer
    reorders between them."""

    def run_layers(net, frames):
        layers = list(net.layers)
        flatten = next(i for i, layer in enumerate(layers) if isinstance(layer, torch.nn.Flatten))
        x = frames.to(torch.float32, copy=True).div_(255.0).to_mkldnn()
        for layer in layers[:flatten]:
            x = layer(x)
        x = x.to_dense()
        for layer in layers[flatten:]:
            x = layer(x)
        return x

    with forward_replaced(with_layers(run_layers)):
        yield


@contextlib.contextmanager
def without_onednn(agent):
    """torch's own layers (im2col + GEMM convolutions, MKL linear layers) instead of the
    oneDNN kernels dqn.network routes every layer to."""
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch_dispatch():
            yield
    finally:
        torch.backends.mkldnn.enabled = previous


@contextlib.contextmanager
def random_reduction_order(agent):
    """compute.cpu_reduction_order=random, the gpu group's on a CPU (other bits by design)."""
    agent.shuffle_rows = True
    try:
        yield
    finally:
        agent.shuffle_rows = False


@contextlib.contextmanager
def foreach_rmsprop(agent):
    """torch.optim.RMSprop's multi-tensor (foreach) implementation, eps and lr the same."""
    group = agent.optimizer.param_groups[0]
    original = agent.optimizer
    replacement = torch.optim.RMSprop(
        group["params"], lr=group["lr"], alpha=group["alpha"], eps=group["eps"], foreach=True
    )
    replacement.load_state_dict(original.state_dict())
    agent.optimizer = replacement
    try:
        yield
    finally:
        original.load_state_dict(replacement.state_dict())
        agent.optimizer = original


@contextlib.contextmanager
def nan_fill(agent):
    """Kept off, shown reverted: use_deterministic_algorithms(True) also NaN-fills every new
    tensor before its first write (torch.utils.deterministic.fill_uninitialized_memory)."""
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = False


@contextlib.contextmanager
def six_kernel_rmsprop(agent):
    """Kept, shown reverted: the RMSprop step as torch's six elementwise kernels, not the
    one pass of dqn.fused_step."""
    agent.optimizer.one_pass = False
    try:
        yield
    finally:
        agent.optimizer.one_pass = True


# "(reverted)": a change the agent has kept, undone here to show what it bought
OPTIONS = {
    "(reverted) NaN fill of new tensors": nan_fill,
    "(reverted) input scaled out of place": out_of_place_scaling,
    "(reverted) RMSprop as torch's six kernels": six_kernel_rmsprop,
    "target forward under inference_mode": target_inference_mode,
    "channels-last (NHWC) networks and inputs": channels_last,
    "convolutions chained in oneDNN's layout": onednn_layout,
    "layers without oneDNN (torch's dispatch)": without_onednn,
    "random reduction order (the gpu group)": random_reduction_order,
    "foreach (multi-tensor) RMSprop": foreach_rmsprop,
}


# -- phases --------------------------------------------------------------------------------------


def timed_update(agent, batch, clock: dict) -> None:
    """DQNAgent.update's code with a clock between its parts."""

    def tick(name, start):
        now = time.perf_counter()
        clock[name] = clock.get(name, 0.0) + now - start
        return now

    t = time.perf_counter()
    states = torch.from_numpy(batch["states"])
    next_states = torch.from_numpy(batch["next_states"])
    actions = torch.from_numpy(batch["actions"].astype(np.int64))
    rewards = torch.from_numpy(batch["rewards"])
    not_terminal = torch.from_numpy(~batch["terminals"])
    t = tick("batch to tensors", t)
    with torch.no_grad():
        targets = agent.td_target(rewards, next_states, not_terminal)
    t = tick("target forward s' and TD target", t)
    q = agent.online(states).gather(1, actions.unsqueeze(1)).squeeze(1)
    t = tick("online forward s", t)
    loss = F.smooth_l1_loss(q, targets)
    t = tick("Huber loss", t)
    agent.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    t = tick("backward", t)
    agent.optimizer.step()
    tick("RMSprop step", t)


def state_of(agent) -> list[torch.Tensor]:
    return list(agent.tensors().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=10, help="updates per timed block")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    params = common.load()
    _, applied = numerics.configure("cpu", args.threads, True)
    agent = common.build_agent(params)
    rng = np.random.default_rng(0)
    batches = random_batches(args.block, params, rng)
    for batch in batches[:3]:  # optimizer state exists, kernels warmed
        agent.update(batch)

    # counted on torch's own ops (FlopCounterMode knows no oneDNN op): the same products
    with FlopCounterMode(display=False) as counter, without_onednn(agent):
        copy.deepcopy(agent).update(batches[0])
    flops = counter.get_total_flops()
    clock: dict[str, float] = {}
    for _ in range(args.rounds):
        for batch in batches:
            timed_update(agent, batch, clock)
    updates = args.rounds * len(batches)
    per_update = sum(clock.values()) / updates
    peak = 32 * core_mhz() * 1e6 * args.threads
    print(
        f"one update: Nature network, batch {params.agent.batch_size}, "
        f"{args.threads} thread(s), ISA {torch.backends.cpu.get_cpu_capability()}, "
        f"allocator {applied['allocator']['malloc']}"
    )
    print(f"{'phase':38} {'ms':>8} {'share':>6}")
    for name, seconds in clock.items():
        print(f"{name:38} {seconds / updates * 1e3:8.2f} {seconds / sum(clock.values()):6.1%}")
    print(f"{'total':38} {per_update * 1e3:8.2f}")
    print(
        f"FLOPs per update (conv + matmul): {flops / 1e9:.3f} GFLOP -> "
        f"{flops / per_update / 1e9:.1f} GFLOP/s; AVX2 FP32 peak at {core_mhz():.0f} MHz: "
        f"{peak / 1e9:.1f} GFLOP/s ({flops / per_update / peak:.0%} of peak)"
    )

    # options: same start, same minibatches, alternating timed blocks
    agents = {"baseline": copy.deepcopy(agent)}
    agents.update({name: copy.deepcopy(agent) for name in OPTIONS})
    times: dict[str, list[float]] = {name: [] for name in agents}
    same_bits = dict.fromkeys(OPTIONS, True)
    errors: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, option_agent in agents.items():
            if name in errors:
                continue
            context = OPTIONS[name](option_agent) if name in OPTIONS else contextlib.nullcontext()
            try:
                with context:
                    start = time.perf_counter()
                    for batch in batches:
                        option_agent.update(batch)
                    times[name].append((time.perf_counter() - start) / len(batches))
            except RuntimeError as error:
                errors[name] = str(error).splitlines()[0]
        baseline = state_of(agents["baseline"])
        for name in OPTIONS:
            if name not in errors:
                same_bits[name] &= all(
                    torch.equal(a, b.contiguous())
                    for a, b in zip(baseline, state_of(agents[name]), strict=True)
                )
    base = statistics.median(times["baseline"])
    print(f"\n{'option':42} {'ms/update':>9} {'speed-up':>8}  bits")
    print(f"{'baseline (as the agent trains)':42} {base * 1e3:9.2f} {1.0:8.3f}")
    for name in OPTIONS:
        if name in errors:
            print(f"{name:42} {'-':>9} {'-':>8}  fails: {errors[name]}")
            continue
        median = statistics.median(times[name])
        print(
            f"{name:42} {median * 1e3:9.2f} {base / median:8.3f}  "
            f"{'same' if same_bits[name] else 'DIFFERENT'}"
        )


if __name__ == "__main__":
    common.run_main(main)
