"""Plot learning checks side by side: greedy score on the authors' start states, mean
max-Q, and distinct greedy actions per checkpoint, with the step-0 network and the
uniform-random policy as baselines (bench/learning_check.py writes the inputs).

    .venv/bin/python bench/learning_plot.py --out docs/learning-check.png \\
        "DQN=build/lc/dqn/learning_check.jsonl" "Double DQN=build/lc/double/learning_check.jsonl"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("score", "greedy score (20 start states)"), ("max_q", "mean max_a Q"),
          ("greedy_actions", "distinct greedy actions"),
          ("q_spread", "Q's spread across start states (log)"))


def read(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as error:
        sys.exit(f"{path}: not a learning_check.jsonl ({error})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=JSONL")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="Learning check: Breakout, paper hyperparameters "
                        "(ε 1→0.1 over 100K from 20K, replay 300K)")
    args = parser.parse_args()
    runs = []
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep:
            sys.exit(f"{item}: expected LABEL=path/to/learning_check.jsonl")
        runs.append((label, read(Path(path))))
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for ax, (key, name) in zip(axes, PANELS, strict=True):
        for label, lines in runs:
            shown = [line for line in lines if key in line]  # older logs lack q_spread
            ax.plot([line["step"] for line in shown], [line[key] for line in shown],
                    marker="o", ms=3, label=label)
        first = runs[0][1][0]
        if key in first["step0"]:
            ax.axhline(first["step0"][key], color="grey", ls="--", lw=1, label="step-0 network")
        if key == "q_spread":
            ax.set_yscale("log")
        elif key != "max_q":  # a random policy's Q-values are noise
            ax.axhline(first["random"][key], color="black", ls=":", lw=1, label="uniform random")
        ax.set_title(name)
        ax.set_xlabel("agent steps")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda x, _: f"{x / 1000:.0f}K"))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(args.out)  # never a half-written figure
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
