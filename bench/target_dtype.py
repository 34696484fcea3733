"""The cost of the authors' TD-target precision (agent.target_dtype: float64) against
float32: one Nature-network update at batch 32, paper hyperparameters, under the CPU floor.

Two agents from the same init seed run the same random minibatches, one update each in
alternating order, so a drift in machine speed hits both alike. Prints milliseconds per
update of both and their ratio.

    .venv/bin/python bench/target_dtype.py [--updates 300]
"""

from __future__ import annotations

import argparse
import time

import common
import numpy as np
import torch
from batches import random_batches

from reprodqn.determinism import numerics
from reprodqn.dqn.agent import DQNAgent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    params = common.load()
    device, _ = numerics.configure("cpu", params.compute.threads, True)
    agents = {}
    for dtype in ("float64", "float32"):
        config = params.agent.model_copy(update={"target_dtype": dtype})
        agents[dtype] = DQNAgent(
            config,
            n_actions=4,
            history_length=4,
            screen_size=84,
            device=device,
            init_generator=torch.Generator().manual_seed(0),
            learning_starts=params.replay.learning_starts,
            reward_clip=params.env.reward_clip,
        )
    batches = random_batches(args.updates + 20, params, np.random.default_rng(0))
    seconds = dict.fromkeys(agents, 0.0)
    for k, batch in enumerate(batches):
        order = list(agents) if k % 2 else list(agents)[::-1]  # neither always goes first
        for dtype in order:
            agent = agents[dtype]
            start = time.perf_counter()
            agent.update(batch).item()
            if k >= 20:  # warm-up
                seconds[dtype] += time.perf_counter() - start
    per = {dtype: 1000 * s / args.updates for dtype, s in seconds.items()}
    print(
        f"float64 targets {per['float64']:.3f} ms/update, float32 {per['float32']:.3f} "
        f"ms/update ({args.updates} updates, Nature network, batch 32, "
        f"{params.compute.threads} thread)"
    )
    print(f"ratio float64 / float32: {per['float64'] / per['float32']:.4f}")


if __name__ == "__main__":
    common.run_main(main)
