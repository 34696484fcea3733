"""Plot learning checks side by side: greedy score on the authors' start states, mean
max-Q, and distinct greedy actions per checkpoint, with the step-0 network and the
uniform-random policy as baselines (experiments/learning_check.py writes the inputs), and, with
--dopamine, Dopamine's published Breakout curves on the score panel.

The documentation's two figures (two panels a row, readable at the page's width):

    L=docs/learning
    .venv/bin/python experiments/learning_plot.py --out docs/learning-check.png \\
        --columns 2 --dopamine $L/dopamine-breakout.json \\
        "authors-2018 init 123=$L/authors-2018-onednn/learning_check.jsonl" \\
        "authors-2018 init 125=$L/authors-2018-init125/learning_check.jsonl" \\
        "authors-2018 init 123, at 4efef4f=$L/authors-2018-actors1/learning_check.jsonl" \\
        "adam=$L/adam/learning_check.jsonl" "deepmind-2015=$L/deepmind-2015/learning_check.jsonl" \\
        "dqn (default)=$L/dqn/learning_check.jsonl"
    T="authors-2018 (seed 123): one actor and 4 lockstep actors at equal transitions; "
    T+="ε 1→0.1 over 100K from 20K, replay 300K, the authors' 100 start states, 18,000-frame cap"
    .venv/bin/python experiments/learning_plot.py --out docs/lockstep-actors.png \\
        --columns 2 --until 400000 --title "$T" \\
        "1 actor=$L/authors-2018-actors1/learning_check.jsonl" \\
        "4 lockstep actors=$L/authors-2018-actors4/learning_check.jsonl"

--markdown FILE writes the same runs as the README's table (score, distinct greedy actions
and Q's spread per checkpoint).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PANELS = (
    ("score", "greedy score on {states}"),
    ("max_q", "mean max_a Q"),
    ("greedy_actions", "distinct greedy actions"),
    ("q_spread", "Q's spread across start states (log)"),
)


def read(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as error:
        sys.exit(f"{path}: not a learning_check.jsonl ({error})")


def draw_dopamine(ax, path: Path, last_step: int) -> None:
    """Their mean training return per 250K-step iteration, at each iteration's midpoint, up
    to our longest run: a different measure (epsilon-greedy training episodes with sticky
    actions) from ours (greedy play from start states), so only its shape compares."""
    try:
        doc = json.loads(path.read_text())
        size = doc["iteration_agent_steps"]
        agents = doc["agents"]
    except (OSError, json.JSONDecodeError, KeyError) as error:
        sys.exit(f"{path}: not a Dopamine reference file ({error})")
    for style, (name, agent) in zip(("-.", ":"), agents.items(), strict=False):
        points = [
            ((i + 0.5) * size, value)
            for i, value in enumerate(agent["returns"])
            if i * size <= last_step
        ]
        ax.plot(
            *zip(*points, strict=True),
            ls=style,
            color="grey",
            lw=1.5,
            label=f"{name}: training return, sticky actions",
        )


def markdown_table(runs: list[tuple[str, list[dict]]]) -> str:
    """The README's table: per checkpoint, each run's score with its distinct greedy actions
    and Q spread in one cell ('—' where a run has not reached the step), one column per run
    so that six runs still fit a page."""
    head = ["step"] + [label for label, _ in runs]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_step = [{line["step"]: line for line in lines} for _, lines in runs]
    for step in sorted({step for lines in by_step for step in lines}):
        cells = [f"{step // 1000}K"]
        for lines in by_step:
            line = lines.get(step)
            cells.append(
                "—"
                if line is None
                else f"**{line['score']:.2f}** ({line['greedy_actions']}, {line['q_spread']:.2g})"
            )
        rows.append("| " + " | ".join(cells) + " |")
    return (
        "Each cell: greedy score (distinct greedy actions, Q's spread across the states).\n\n"
        + "\n".join(rows)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=JSONL")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--title",
        default="Learning checks on Breakout: ε 1→0.1 over 100K "
        "steps from step 20K, replay 300K; greedy play on the authors' 100 "
        "start states, 18,000-frame cap",
    )
    parser.add_argument(
        "--dopamine",
        type=Path,
        default=None,
        help="docs/learning/dopamine-breakout.json: their per-iteration "
        "training returns, drawn on the score panel",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="also write the runs as the README's markdown table here",
    )
    parser.add_argument(
        "--states",
        default="the authors' start states",
        help="what the probes played from, for the score panel's title",
    )
    parser.add_argument(
        "--panels",
        nargs="+",
        choices=[key for key, _ in PANELS],
        default=[key for key, _ in PANELS],
        help="which panels to draw (a game whose probe states are all one screen, Pong's "
        "no-op starts, has no greedy-action or spread panel worth drawing)",
    )
    parser.add_argument(
        "--columns", type=int, default=None, help="panels per row (default: all in one row)"
    )
    parser.add_argument(
        "--until", type=int, default=None, help="draw the checkpoints up to this step only"
    )
    args = parser.parse_args()
    panels = [(key, name.format(states=args.states)) for key, name in PANELS if key in args.panels]
    runs = []
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep:
            sys.exit(f"{item}: expected LABEL=path/to/learning_check.jsonl")
        lines = read(Path(path))
        runs.append(
            (label, [line for line in lines if line["step"] <= (args.until or line["step"])])
        )
    if args.markdown:
        args.markdown.write_text(markdown_table(runs))
    columns = min(args.columns or len(panels), len(panels))
    grid = -(-len(panels) // columns)
    # the title wrapped to the figure's width (about 11 characters an inch at its size)
    title = textwrap.wrap(args.title, width=int(11 * 4.5 * columns))
    fig, axes = plt.subplots(grid, columns, figsize=(4.5 * columns, 4.5 * grid), squeeze=False)
    axes = axes.flatten()[: len(panels)]
    for ax, (key, name) in zip(axes, panels, strict=True):
        step0: dict[float, list[tuple[int, str]]] = {}  # runs sharing an initialisation: one line
        for colour, (label, lines) in enumerate(runs):
            shown = [line for line in lines if key in line]  # older logs lack q_spread
            ax.plot(
                [line["step"] for line in shown],
                [line[key] for line in shown],
                marker="o",
                ms=3,
                color=f"C{colour}",
                label=label,
            )
            if key in lines[0]["step0"]:
                step0.setdefault(lines[0]["step0"][key], []).append((colour, label))
        for value, sharing in step0.items():
            ax.axhline(
                value,
                color=f"C{sharing[0][0]}",
                ls="--",
                lw=0.8,
                alpha=0.6,
                label=(
                    "step-0 network: " + ", ".join(label for _, label in sharing)
                    if key == "score"
                    else None
                ),
            )  # named once, in the legend
        first = runs[0][1][0]
        if key == "score" and args.dopamine:
            draw_dopamine(
                ax, args.dopamine, max(line["step"] for _, lines in runs for line in lines)
            )
        if key == "q_spread":
            ax.set_yscale("log")
        elif key != "max_q":  # a random policy's Q-values are noise
            ax.axhline(first["random"][key], color="black", ls=":", lw=1, label="uniform random")
        ax.set_title(name)
        ax.set_xlabel("agent steps")
        ax.xaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:.0f}K")
        )
        ax.grid(alpha=0.3)
    handles = {}
    for ax in axes:  # one legend for all panels, below them
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    legend_columns = min(3, columns)  # its labels run long: three fit below 3 panels
    rows = -(-len(handles) // legend_columns)  # the legend's rows, below the panels
    height = 4.5 * grid + 0.3 * rows + 0.6 + 0.3 * len(title)  # panels, legend, title
    fig.set_size_inches(4.5 * columns, height)
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="lower center",
        ncol=legend_columns,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle("\n".join(title))
    fig.tight_layout(rect=(0, (0.3 * rows + 0.2) / height, 1, 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(args.out)  # never a half-written figure
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
