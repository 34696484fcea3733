"""Seconds on a GPU before gpu-check's minutes: does the fast path's update capture as a
CUDA graph, and do its replays give the standard path's bits? Two copies of the study's
agent (Nature network, batch 32, RMSprop) start from one init; one updates eagerly from the
host replay, the other through dqn.cuda_graphs from the device replay, on the same
minibatches of the same frames, the target synced every 10 updates, and the fast agent
reloaded halfway as a resume reloads it (its graphs captured again). Every loss, then every
weight, target weight and optimizer tensor, and the greedy actions of a batch of states,
are compared bit for bit. A failure to capture is printed with torch's own message.

    .venv/bin/python bench/capture_probe.py [--updates 50] [--device cuda]

`--device cpu` runs the same comparison with the graphs' code run eagerly.
"""

from __future__ import annotations

import argparse
import traceback

import common
import numpy as np
import torch

from reprodqn.determinism import numerics
from reprodqn.dqn.cuda_graphs import CudaGraphs
from reprodqn.dqn.device_replay import DeviceReplayMemory
from reprodqn.dqn.replay import ReplayMemory

SLOTS = 5000


def filled(device: torch.device) -> tuple[ReplayMemory, DeviceReplayMemory]:
    """The same frames, actions, rewards and episodes in a host and a device memory."""
    host = ReplayMemory(SLOTS, 4, 84)
    on_device = DeviceReplayMemory(SLOTS, 4, 84, device)
    rng = np.random.default_rng(0)
    episode_step = 0
    for _ in range(SLOTS - 10):
        frame = rng.integers(0, 256, (84, 84), dtype=np.uint8)
        action, reward = int(rng.integers(0, 4)), float(rng.integers(-1, 2))
        terminal = bool(rng.random() < 0.01)
        for memory in (host, on_device):
            memory.add(frame, action, reward, terminal, episode_step)
        episode_step = 0 if terminal else episode_step + 1
    return host, on_device


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    params = common.load()
    device, _ = numerics.configure(args.device, params.compute.threads, True)
    host, on_device = filled(device)
    standard = common.build_agent(params, device=args.device)
    fast = common.build_agent(params, device=args.device)
    graphs = CudaGraphs(fast, on_device, capture=device.type == "cuda")
    draws = np.random.default_rng(1)
    losses_differ = 0
    for update in range(args.updates):
        candidates = draws.integers(4, SLOTS - 11, 200)
        indices = np.array([i for i in candidates if host.valid(int(i))][:32])
        want = standard.update(host.transitions(indices))
        try:
            got = graphs.update(indices)
        except Exception:
            print(f"update {update + 1}: the fast path failed:\n{traceback.format_exc()}")
            return 2
        losses_differ += int(not torch.equal(want, got))
        if update % 10 == 9:  # the target copied in place, under the graph's feet
            standard.sync_target()
            fast.sync_target()
        if update == args.updates // 2:  # a resume: new optimizer tensors, captured again
            fast.load_tensors(fast.tensors())
            graphs.release()
    a, b = standard.tensors(), fast.tensors()
    tensors_differ = [k for k in a if not torch.equal(a[k], b[k])]
    states = host.transitions(np.arange(100, 132))["states"]
    actions = [standard.greedy_action(s) == graphs.act(s) for s in states]
    print(
        f"{args.device} ({'graphs captured' if graphs.capture else 'graph code run eagerly'}): "
        f"{args.updates} updates, losses differing: {losses_differ}; tensors differing: "
        f"{len(tensors_differ)} of {len(a)} {tensors_differ[:4]}; greedy actions equal: "
        f"{sum(actions)} of {len(actions)}"
    )
    return 0 if not losses_differ and not tensors_differ and all(actions) else 1


if __name__ == "__main__":
    common.run_main(main)
