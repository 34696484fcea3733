"""Replay memory at the paper's capacity: bytes per transition and peak RSS.

Fills a 1,000,000-transition ReplayMemory with synthetic episodes, samples minibatches,
and prints bytes per transition and the process's peak RSS. Baseline, measured in the
same run at a smaller capacity (a 24 GB machine cannot hold it at 1M): a buffer that
stores each transition's 4-frame stack, s' being the next row (28 GB at 1M).

    .venv/bin/python bench/replay_memory.py [--capacity 1000000] [--baseline-capacity 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

FRAME = 84


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fill_and_sample(kind: str, capacity: int) -> dict:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (256, FRAME, FRAME), dtype=np.uint8)
    start = time.perf_counter()
    if kind == "ours":
        from reprodqn.determinism.rng import AuthorsStream
        from reprodqn.dqn.replay import ReplayMemory

        memory = ReplayMemory(capacity, 4, FRAME)
        for t in range(capacity):
            memory.add(frames[t % 256], t % 4, 0.0, t % 997 == 996, t % 997)
        fill = time.perf_counter() - start
        stream = AuthorsStream(0)
        start = time.perf_counter()
        for _ in range(1000):
            memory.sample(32, stream)
        nbytes = memory.nbytes
    else:  # stacked baseline: one full 4-frame stack per transition
        states = np.zeros((capacity, 4, FRAME, FRAME), np.uint8)
        for t in range(capacity):
            states[t] = frames[t % 253 : t % 253 + 4]
        fill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(1000):
            idx = rng.integers(0, capacity - 1, 32)
            states[idx], states[idx + 1]
        nbytes = states.nbytes
    sample = (time.perf_counter() - start) / 1000
    return {
        "kind": kind,
        "capacity": capacity,
        "bytes": nbytes,
        "bytes_per_transition": nbytes / capacity,
        "peak_rss": peak_rss_bytes(),
        "fill_seconds": fill,
        "sample_ms": sample * 1e3,
    }


def measure(kind: str, capacity: int) -> dict:
    """Each measurement in a fresh process, so peak RSS is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(capacity)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--baseline-capacity", type=int, default=100_000)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(fill_and_sample(args.child[0], int(args.child[1]))))
        return

    small_ours = measure("ours", args.baseline_capacity)
    small_base = measure("stacked", args.baseline_capacity)
    full = measure("ours", args.capacity)
    gb = 1e9
    print(f"replay memory, capacity {args.capacity:,}:")
    print(
        f"  bytes per transition   {full['bytes_per_transition']:,.0f} "
        f"(frames alone {FRAME * FRAME:,})"
    )
    print(f"  arrays                 {full['bytes'] / gb:.3f} GB")
    print(
        f"  peak RSS               {full['peak_rss'] / gb:.3f} GB "
        f"({full['peak_rss'] / 2**30:.3f} GiB)  target <= 7.3 GB"
    )
    print(f"  fill {full['fill_seconds']:.1f} s, sample(32) {full['sample_ms']:.3f} ms")
    print(f"baseline at capacity {args.baseline_capacity:,} (same run):")
    print(
        f"  stacked        {small_base['bytes_per_transition']:,.0f} B/transition, "
        f"peak RSS {small_base['peak_rss'] / gb:.3f} GB, "
        f"sample(32) {small_base['sample_ms']:.3f} ms"
    )
    print(
        f"  ours           {small_ours['bytes_per_transition']:,.0f} B/transition, "
        f"peak RSS {small_ours['peak_rss'] / gb:.3f} GB, "
        f"sample(32) {small_ours['sample_ms']:.3f} ms"
    )
    ratio = small_ours["bytes_per_transition"] / small_base["bytes_per_transition"]
    print(
        f"  ratio ours/stacked bytes per transition: {ratio:.3f} "
        f"(stacked at 1M would need {small_base['bytes_per_transition'] * 1e6 / gb:.1f} GB)"
    )


if __name__ == "__main__":
    main()
