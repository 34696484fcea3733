"""Lockstep actors: agent transitions per second for N = 1, 2, 4, 8 games, with the games
in this process (K = 0) and in K = 1 and 2 worker processes, in the learning phase (Nature
network, batch 32, an update per 4 transitions, epsilon 0.1: a greedy forward nearly every
round), printed as ratios to N = 1; and the same with learning switched off (acting and
emulation alone, updates never due), where the games' share of the time is all there is
to gain.

Each setting trains the real loop (training.loop.make_run) past a short replay fill, then
is timed over whole rounds; settings alternate over --rounds so a drift in machine speed
hits all alike. N = 1 is the paper's single actor (no worker process, whatever K).

    .venv/bin/python bench/actors_throughput.py [--rounds 3] [--block 400] [--actors 1 2 4 8]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import common

from reprodqn.config.params import resolve_run
from reprodqn.core.workers import ACTOR_WORKERS_ENV
from reprodqn.determinism import numerics
from reprodqn.training.loop import make_run

WARMUP = 2000  # transitions before learning starts (replay fill)


def build(actors: int, workers: int, learning: bool, block: int, rounds: int):
    steps = 8 * ((WARMUP + 40 * actors + block * rounds) // 8 + 8)  # whole rounds for any N
    # one checkpoint interval for the whole run: no evaluation cut inside the timed rounds
    overrides = [
        f"train.actors={actors}",
        f"replay.learning_starts={WARMUP}",
        "agent.epsilon_decay_steps=1",
        f"replay.capacity={steps}",
        f"train.steps={steps}",
        f"train.checkpoint_every={steps}",
        f"train.resume_every={steps}",
        f"train.log_every={steps}",
    ]
    if not learning:  # updates never due: acting, emulation and storage only
        overrides.append(f"agent.update_every={10**9}")
    config = resolve_run(common.load(overrides), "deterministic", 0)
    device, _ = numerics.configure(
        config.compute.device, config.compute.threads, config.compute.deterministic_gpu
    )
    os.environ[ACTOR_WORKERS_ENV] = str(workers)
    run = make_run(config, Path(tempfile.mkdtemp()), device)
    while run.step < WARMUP + 40 * actors:  # fill replay, warm the kernels up
        run.advance()
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=400, help="transitions per timing")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    settings = [(n, k) for n in args.actors for k in ([0, *args.workers] if n > 1 else [0])]
    for learning in (True, False):
        runs = {s: build(*s, learning, args.block, args.rounds) for s in settings}
        seconds = dict.fromkeys(settings, 0.0)
        for _ in range(args.rounds):
            for setting, run in runs.items():
                start = time.perf_counter()
                end = run.step + args.block
                while run.step < end:
                    run.advance()
                run.flush_losses()
                seconds[setting] += time.perf_counter() - start
        for run in runs.values():
            run.close()
        rates = {s: args.rounds * args.block / seconds[s] for s in settings}
        base = rates[(1, 0)]
        print(
            f"\n{'learning phase' if learning else 'acting alone (no updates)'}: "
            f"transitions/s, ratio to N = 1"
        )
        for (n, k), rate in rates.items():
            where = "in-process" if k == 0 else f"K={k}"
            print(f"  N={n:<2} {where:<11} {rate:8.1f}   {rate / base:5.2f}x")


if __name__ == "__main__":
    common.run_main(main)
