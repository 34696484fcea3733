"""Scoring an SB3 model under the paper's protocol: `reprodqn evaluate-policy` (the
evaluator's fixed chunks and worker processes) against SB3's own `evaluate_policy` on the
Gymnasium eval env (one episode after another, batch-1 forwards), on the same episodes,
in alternating rounds of this run. Both give the same per-episode scores (the tests check
it); this measures the time.

    .venv/bin/python bench/policy_eval.py [--episodes 100] [--max-frames 18000] [--workers 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import gymnasium as gym
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy

from reprodqn.envs import atari


def ours(model: Path, out: Path, args) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "evaluate-policy",
            str(model),
            "--out-dir",
            str(out),
            "--workers",
            str(args.workers),
            "--params",
            str(common.PARAMS),
            "--set",
            f"evaluation.episodes={args.episodes}",
            "--set",
            f"evaluation.max_frames={args.max_frames}",
        ],
        check=True,
        capture_output=True,
        cwd=common.ROOT,
    )
    return time.perf_counter() - start


def theirs(model: DQN, args) -> float:
    env = gym.make(atari.ENV_ID, mode="eval", max_frames=args.max_frames)
    start = time.perf_counter()
    evaluate_policy(
        model,
        env,
        n_eval_episodes=args.episodes,
        deterministic=True,
        return_episode_rewards=True,
        warn=False,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--max-frames", type=int, default=18_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "dqn.zip"
        model = DQN(
            "CnnPolicy", atari.AtariEnv(mode="train"), buffer_size=1_000, seed=0, device="cpu"
        )  # an untrained policy: the cost is the same
        model.save(path)
        times = {"reprodqn": [], "sb3": []}
        for round_ in range(args.rounds):
            times["reprodqn"].append(ours(path, Path(scratch) / f"out-{round_}", args))
            times["sb3"].append(theirs(model, args))
            print(
                f"round {round_ + 1}/{args.rounds}: reprodqn {times['reprodqn'][-1]:.1f} s, "
                f"sb3 {times['sb3'][-1]:.1f} s",
                flush=True,
            )
    best = {name: min(values) for name, values in times.items()}
    print(
        f"{args.episodes} episodes, cap {args.max_frames} frames: reprodqn evaluate-policy "
        f"({args.workers} workers) {best['reprodqn']:.1f} s, SB3 evaluate_policy "
        f"{best['sb3']:.1f} s: {best['sb3'] / best['reprodqn']:.2f}x as fast"
    )


if __name__ == "__main__":
    common.run_main(main)
