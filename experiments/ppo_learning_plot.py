"""Plot a PPO run's learning curve (examples/ppo_breakout.py): every finished training
game's raw score against environment steps, with the mean of the last `--window` games,
and print the first and last windows' means.

    .venv/bin/python experiments/ppo_learning_plot.py ~/reprodqn-ppo/run/scores.jsonl \\
        --out docs/learning/ppo-breakout/curve.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scores", type=Path, help="the run's scores.jsonl")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--window", type=int, default=100, help="games in the running mean")
    p.add_argument("--title", default="PPO on reprodqn/Breakout-v0 (train mode), one CPU core")
    args = p.parse_args()
    try:
        games = [json.loads(line) for line in args.scores.read_text().splitlines()]
    except (OSError, json.JSONDecodeError) as error:
        sys.exit(f"{args.scores}: not a scores.jsonl ({error})")
    if len(games) < args.window:
        sys.exit(f"{args.scores}: {len(games)} games, fewer than --window {args.window}")
    steps = np.array([g["step"] for g in games])
    scores = np.array([g["score"] for g in games])
    running = np.convolve(scores, np.ones(args.window) / args.window, mode="valid")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.scatter(steps, scores, s=4, alpha=0.25, color="tab:blue", label="one game's score")
    ax.plot(steps[args.window - 1 :], running, color="tab:red", label=f"mean of {args.window}")
    ax.set_xlabel("environment steps (all environments)")
    ax.set_ylabel("game score (raw)")
    ax.set_title(args.title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(
        f"{len(games)} games; mean of the first {args.window}: {scores[: args.window].mean():.2f}; "
        f"of the last {args.window}: {scores[-args.window :].mean():.2f} (to step {steps[-1]:,})"
    )


if __name__ == "__main__":
    main()
