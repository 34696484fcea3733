"""Training speed after annealing against CleanRL's dqn_atari.py, the peer a DQN user would
reach for, on the same machine at the same thread count, in alternating rounds.

Ours: bench/train_throughput.py's "after annealing" phase (the real loop at params.yaml's
defaults: Nature network, batch 32, an update every 4 steps, epsilon 0.1, one process).
CleanRL: its dqn_atari.py as published (Adam, its wrappers and replay buffer), with epsilon
annealed to 0.1 at once so that both act greedily as often, run for --steps agent steps
after learning starts; its learning-phase rate comes from its first and last SPS lines
(SPS is cumulative: steps over seconds since its start). Both get torch's intra-op thread
count from OMP_NUM_THREADS. CleanRL's script targets gymnasium 0.29; under this venv's
gymnasium 1.x two wrappers were renamed, and the shim below maps the old names onto them.

    .venv/bin/python bench/cleanrl_compare.py --cleanrl DIR --cleanrl-python PY
        [--threads 1 2] [--rounds 3] [--steps 2000]

DIR holds cleanrl/dqn_atari.py and cleanrl_utils/ (a checkout of vwxyzjn/cleanrl); PY is
a Python with torch, gymnasium, ale-py, opencv, tyro and tensorboard.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SHIM = """
import sys, runpy, ale_py, gymnasium as gym
gym.register_envs(ale_py)
gym.wrappers.GrayScaleObservation = gym.wrappers.GrayscaleObservation
gym.wrappers.FrameStack = gym.wrappers.FrameStackObservation
sys.path.insert(0, {root!r})
sys.argv = {argv!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def environment(threads: int) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def ours(threads: int, steps: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / "train_throughput.py"),
            "--phase",
            "after annealing",
            "--threads",
            str(threads),
            "--rounds",
            "4",
            "--block",
            str(steps // 4),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=environment(threads),
    )
    return float(re.search(r"training loop\s+([\d.]+)", out.stdout).group(1))


def cleanrl(
    root: Path, python: str, threads: int, steps: int, warmup: int, cuda: bool = False
) -> float:
    total = warmup + steps
    script = root / "cleanrl" / "dqn_atari.py"
    argv = [
        str(script),
        "--env-id",
        "BreakoutNoFrameskip-v4",
        "--total-timesteps",
        str(total),
        "--learning-starts",
        str(warmup),
        "--buffer-size",
        str(total + 100),
        "--exploration-fraction",
        str(1 / total),
        "--end-e",
        "0.1",
        "--cuda" if cuda else "--no-cuda",
        "--no-track",
        "--seed",
        "1",
    ]
    code = SHIM.format(root=str(root), argv=argv, script=str(script))
    with tempfile.TemporaryDirectory() as scratch:  # its tensorboard runs/ and model go here
        out = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            env=environment(threads),
            cwd=scratch,
        )
    if out.returncode:
        raise SystemExit(f"cleanrl: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    # each SPS line is printed at a step that is a multiple of 100, once learning runs
    rates = [int(m) for m in re.findall(r"^SPS: (\d+)$", out.stdout, re.M)]
    first_step = (warmup // 100 + 1) * 100
    last_step = first_step + 100 * (len(rates) - 1)
    seconds = last_step / rates[-1] - first_step / rates[0]
    return (last_step - first_step) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", type=Path, required=True, metavar="DIR")
    parser.add_argument("--cleanrl-python", required=True, metavar="PY")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000, help="agent steps timed per run")
    parser.add_argument("--warmup", type=int, default=5000, help="CleanRL's learning_starts")
    args = parser.parse_args()
    print(
        f"after annealing, agent steps/s, median of {args.rounds} alternating rounds, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'threads':>7} {'reprodqn':>9} {'CleanRL':>8} {'ratio':>6}")
    for threads in args.threads:
        a, b = [], []
        for round_ in range(args.rounds):
            a.append(ours(threads, args.steps))
            b.append(cleanrl(args.cleanrl, args.cleanrl_python, threads, args.steps, args.warmup))
            print(
                f"  {threads} thread(s), round {round_ + 1}: {a[-1]:.1f} vs {b[-1]:.1f}",
                file=sys.stderr,
                flush=True,
            )
        mine, theirs = statistics.median(a), statistics.median(b)
        print(f"{threads:>7} {mine:9.1f} {theirs:8.1f} {mine / theirs:6.2f}")


if __name__ == "__main__":
    main()
