"""Training speed in the learning phase at paper hyperparameters, against the bound set by
the network updates alone.

Trains the real loop (Nature network, batch 32, one RMSprop update per 4 agent steps,
target copies, replay sampling, emulation, epsilon-greedy acting) at both ends of the
learning phase: just after learning starts, on the paper's schedule (epsilon ~1, acting
nearly free), and after annealing (epsilon 0.1, the last 95% of the 20M steps, where a
greedy forward pass is needed 9 steps in 10). The bound is the
same number of updates on random minibatches (one fresh batch each) by a copy of the
agent, nothing else. The two are timed in alternating blocks so that a drift in machine
speed hits both alike. Prints agent steps per second of both and their ratio (target
>= 0.85 on the CPU).

    .venv/bin/python bench/train_throughput.py [--rounds 6] [--block 500] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import common
import numpy as np
from batches import random_batches

from reprodqn.config.params import load_params, resolve_run
from reprodqn.determinism import numerics
from reprodqn.training.loop import Run

PHASES = {"start of learning": [], "after annealing": ["agent.epsilon_decay_steps=1"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=500, help="agent steps per round")
    parser.add_argument("--threads", type=int, default=None, help="default: params value")
    parser.add_argument("--warmup", type=int, default=5000, help="steps before learning")
    parser.add_argument(
        "--phase", choices=sorted(PHASES), default=None, help="one phase only (default: both)"
    )
    args = parser.parse_args()
    for phase, schedule in PHASES.items():
        if args.phase in (None, phase):
            measure(phase, schedule, args)


def measure(phase: str, schedule: list[str], args) -> None:
    total = args.rounds * args.block
    overrides = [  # paper hyperparameters; replay fills faster to reach the phase sooner
        f"replay.learning_starts={args.warmup}",
        f"replay.capacity={args.warmup + total + 100}",
        *schedule,
    ]
    if args.threads:
        overrides.append(f"compute.threads={args.threads}")
    config = resolve_run(load_params(common.PARAMS, overrides), "deterministic", 0)
    device, applied = numerics.configure(
        config.compute.device, config.compute.threads, config.compute.deterministic_gpu
    )
    run = Run(config, Path(tempfile.mkdtemp()), device)
    while run.step < args.warmup + 40:  # fill replay, then warm the kernels up
        run.advance()
    bound_agent = copy.deepcopy(run.agent)
    rng = np.random.default_rng(0)

    train_seconds = bound_seconds = 0.0
    updates = 0
    for _ in range(args.rounds):
        before = run.updates
        start = time.perf_counter()
        for _ in range(args.block):
            run.advance()
        run.flush_losses()
        train_seconds += time.perf_counter() - start
        block_updates = run.updates - before
        updates += block_updates

        batches = random_batches(block_updates, config, rng)
        start = time.perf_counter()
        losses = [bound_agent.update(batch) for batch in batches]
        float(sum(loss.item() for loss in losses))
        bound_seconds += time.perf_counter() - start

    ours = total / train_seconds
    bound = total / bound_seconds
    epsilon = run.agent.epsilon.value
    print(
        f"{phase}: epsilon {epsilon:.3f}; device {applied['device']}, torch threads "
        f"{applied['torch_threads']}, network {config.agent.network}, batch "
        f"{config.agent.batch_size}, update every {config.agent.update_every} steps"
    )
    print(
        f"training loop  {ours:8.1f} agent steps/s  ({total} steps, {updates} updates, "
        f"{args.rounds} rounds)"
    )
    print(f"updates alone  {bound:8.1f} agent steps/s  (the same {updates} updates)")
    print(f"ratio          {ours / bound:8.3f}  (target >= 0.85)")


if __name__ == "__main__":
    common.run_main(main)
