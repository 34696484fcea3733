"""What prioritized replay costs: its sampling and priority update as a fraction of one
Nature-network update at batch 32 (target <= 5% on the CPU), and its memory at 1M.

PER's own work per update is: the stratified draws through a 1M-leaf sum tree (depth 20)
with the validity checks, the sampled leaves' probabilities, the importance weights, and
writing the new priorities (deduplicate, (p + eps)^alpha, recompute ancestors). The tree
here has 1,000,000 leaves over a replay of 1M steps with 2x2 frames (the 7 GB of 84x84
frames would change no PER cost: frames are gathered alike for uniform sampling). The
update is the real agent's (Nature network, RMSprop, float64 targets) on random 84x84
minibatches. The two are timed in alternating rounds, so a drift in machine speed (a
shared machine) hits both alike; the ratio of medians is printed. R2D2's mixture adds
forward passes over each sample's n-step window; that cost is printed beside it.

    .venv/bin/python bench/per_overhead.py [--rounds 7] [--updates 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import common
import numpy as np
import torch
from batches import random_batches

from reprodqn.determinism import numerics
from reprodqn.determinism.rng import AuthorsStream
from reprodqn.dqn import priority_rule
from reprodqn.dqn.prioritized_replay import PrioritizedReplay
from reprodqn.dqn.replay import ReplayMemory
from reprodqn.dqn.sum_tree import SumTree, tree_bytes

CAPACITY = 1_000_000


def filled_per(config, n_step: int = 1) -> PrioritizedReplay:
    """PER over a full 1M replay of 2x2 frames, episodes of 400 steps with life losses."""
    memory = ReplayMemory(CAPACITY, 4, 2, n_step=n_step)
    t = np.arange(CAPACITY)
    memory.actions[:] = t % 4
    memory.rewards[:] = (t % 7 == 0).astype(np.float32)
    memory.terminals[:] = (t + 1) % 400 == 0
    memory.episode_time[:] = (t % 400) % 256
    if n_step > 1:
        memory.starts[:] = t % 400 == 0
    memory.size, memory.cursor = CAPACITY, 123_457
    per = PrioritizedReplay(memory, config)
    leaves = np.random.default_rng(0).gamma(1.0, size=CAPACITY) ** config.alpha
    leaves[
        [
            i
            for i in range(CAPACITY)
            if i < 4 or i > CAPACITY - n_step - 1 or not memory.history_valid(i)
        ]
    ] = 0.0
    per.tree.set_state({"leaves": leaves})
    return per


def per_step(per: PrioritizedReplay, stream, errors: np.ndarray, config) -> None:
    """PER's share of one update: sample indices, their probabilities and weights, then
    the new priorities."""
    indices = per.sample_indices(32, stream)
    batch = {
        "probabilities": per.tree.leaves[indices] / per.tree.total,
        "population": len(per.memory),
    }
    priority_rule.importance_weights(batch, config, 1_000_000)
    per.set_priorities(indices, errors)


def uniform_step(memory: ReplayMemory, stream) -> None:
    memory.sample_indices(32, stream)


def timed(function, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        function()
    return (time.perf_counter() - start) / count


def window_cost(agent, batch: dict, n_step: int) -> float:
    """R2D2's extra forward passes: online and target over 32 x (n - 1) later transitions."""
    later = dict(batch)
    later = {k: np.concatenate([v] * (n_step - 1)) for k, v in later.items()}
    later["discounts"] = np.full(len(later["rewards"]), 0.99**n_step)
    later["rewards"] = later["rewards"].astype(np.float64)
    with torch.no_grad():
        return timed(lambda: agent.targets_and_q(later), 5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--updates", type=int, default=40, help="updates per round")
    parser.add_argument("--threads", type=int, default=None, help="default: params value")
    args = parser.parse_args()
    params = common.load(["replay.prioritized=true"])
    threads = args.threads or params.compute.threads
    device, _ = numerics.configure("cpu", threads, True)
    agent = common.build_agent(
        params, device=str(device), learning_starts=params.replay.learning_starts
    )
    rng = np.random.default_rng(1)
    batches = [random_batches(1, params, rng)[0] for _ in range(8)]
    print(f"building a 1M-leaf tree over a 1M-step replay (threads={threads}) ...")
    per = filled_per(params.priority)
    stream, errors = AuthorsStream(0), rng.random(32) * 2
    update_s, per_s, uniform_s = [], [], []
    for r in range(args.rounds):  # alternating: update, PER, uniform sampling
        update_s.append(timed(lambda r=r: agent.update(batches[r % 8]), args.updates))
        per_s.append(
            timed(lambda: per_step(per, stream, errors, params.priority), args.updates * 5)
        )
        uniform_s.append(timed(lambda: uniform_step(per.memory, stream), args.updates * 5))
    update, per_time, uniform = (statistics.median(x) for x in (update_s, per_s, uniform_s))
    print(f"Nature update, batch 32: {update * 1e3:.2f} ms (median of {args.rounds} rounds)")
    print(
        f"PER sampling + priority update: {per_time * 1e3:.3f} ms = "
        f"{per_time / update:.2%} of an update (target <= 5%)"
    )
    print(
        f"  uniform index sampling, for comparison: {uniform * 1e3:.3f} ms = "
        f"{uniform / update:.2%}; PER's extra: {(per_time - uniform) / update:.2%}"
    )
    window = window_cost(agent, random_batches(1, params, rng)[0], 5)
    print(
        f"R2D2 window (n = 5, eta > 0): +{window / update:.0%} of an "
        "update in forward passes over the 4 later transitions of each sample"
    )
    tree = SumTree(CAPACITY)
    print(
        f"memory at 1M: sum tree {tree.nbytes:,} bytes ({tree.nbytes / 2**20:.1f} MiB; "
        f"tree_bytes = {tree_bytes(CAPACITY):,}); plus 8 bytes of Python state; replay "
        f"itself unchanged ({CAPACITY * (84 * 84 + 8) / 1e9:.2f} GB)"
    )


if __name__ == "__main__":
    common.run_main(main)
