"""What `reprodqn trace` costs: one Nature-network update at batch 32 (paper
hyperparameters, the CPU floor) with every op's outputs hashed and recorded, against the
same update untraced.

Two agents from the same init seed run the same random minibatches, one update each in
alternating order, so a drift in machine speed hits both alike. Prints milliseconds per
update of both and their ratio, and checks the traced agent's weights equal the other's.

    .venv/bin/python bench/trace_overhead.py [--updates 100]
"""

from __future__ import annotations

import argparse
import json
import time

import common
import numpy as np
import torch
from batches import random_batches

from reprodqn.determinism import numerics
from reprodqn.dqn.agent import DQNAgent
from reprodqn.forensics.trace import NamedModuleTracker, OpRecorder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=100)
    args = parser.parse_args()
    params = common.load()
    device, _ = numerics.configure("cpu", params.compute.threads, True)
    plain, traced = (
        DQNAgent(
            params.agent,
            n_actions=4,
            history_length=4,
            screen_size=84,
            device=device,
            init_generator=torch.Generator().manual_seed(0),
            learning_starts=params.replay.learning_starts,
            reward_clip=params.env.reward_clip,
        )
        for _ in range(2)
    )
    tracker = NamedModuleTracker({"online": traced.online, "target": traced.target})
    recorder = OpRecorder(tracker)
    batches = random_batches(args.updates + 10, params, np.random.default_rng(0))
    seconds = {"plain": 0.0, "traced": 0.0}
    ops = 0
    for k, batch in enumerate(batches):
        for name in ("plain", "traced") if k % 2 else ("traced", "plain"):
            start = time.perf_counter()
            if name == "plain":
                plain.update(batch).item()
            else:
                with tracker, recorder:
                    traced.update(batch).item()
                json.dumps(recorder.ops, separators=(",", ":"))
                ops += len(recorder.ops) if k >= 10 else 0
                recorder.ops = []
            if k >= 10:  # warm-up excluded
                seconds[name] += time.perf_counter() - start
    same = all(
        a.equal(b) for a, b in zip(plain.tensors().values(), traced.tensors().values(), strict=True)
    )
    per = {name: 1e3 * s / args.updates for name, s in seconds.items()}
    print(
        f"update (Nature, batch 32, {params.compute.cpu_isa} floor, "
        f"{params.compute.threads} thread): plain {per['plain']:.2f} ms, traced "
        f"{per['traced']:.2f} ms ({ops // args.updates} ops hashed per update); "
        f"traced/plain {per['traced'] / per['plain']:.2f}; weights identical: {same}"
    )


if __name__ == "__main__":
    common.run_main(main)
