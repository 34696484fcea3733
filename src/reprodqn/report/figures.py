"""The report's figures: Figure 1 (mean score over training per group), the
deterministic agent's score per start state (the paper's Figures 2 and 4), where groups
part, and the blind-network probe. PNG and PDF,
written without timestamps so the same study gives the same files."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from reprodqn.config.study import GROUP_NAMES


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _wrapped(label: str) -> str:
    return textwrap.fill(label, 34)


def figure1(study, out_dir: Path, labels: dict[str, str] | None = None) -> list[Path]:
    """Six panels: mean score over training per group, +-1 std shaded, same axes."""
    plt = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), sharex=True, sharey=True)
    for ax, group in zip(axes.flat, GROUP_NAMES, strict=True):
        runs = [r for r in study.get(group, []) if r.steps]
        ax.set_title(_wrapped((labels or {}).get(group, group)), fontsize="medium")
        if not runs:
            ax.text(
                0.5,
                0.5,
                "no runs" if group in study else "left out of this study\n(study.left_out)",
                ha="center",
                transform=ax.transAxes,
            )
            continue
        steps = np.array(runs[0].steps)
        curves = np.stack([r.curve for r in runs if len(r.steps) == len(steps)])
        mean, std = curves.mean(axis=0), curves.std(axis=0)
        ax.plot(steps, mean, color="C0")
        ax.fill_between(steps, mean - std, mean + std, color="C0", alpha=0.3, linewidth=0)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("agent steps")
        ax.xaxis.set_major_formatter(_steps_formatter())
    for ax in axes[:, 0]:
        ax.set_ylabel("mean score")
    fig.suptitle("Figure 1: mean evaluation score per group (shaded: +-1 std over runs)")
    fig.tight_layout()
    return _save(fig, out_dir / "figure1")


def start_state_figures(study, out_dir: Path) -> list[Path]:
    """The deterministic agent's score on individual start states over training (the
    paper's Figure 2 for one start state, Figure 4 for all)."""
    plt = _plt()
    runs = [r for r in study.get("deterministic", []) if r.steps]
    if not runs:
        return []
    run = runs[0]
    steps = np.array(run.steps)
    per_state = np.array([run.scores[s] for s in run.steps]).T  # (episodes, checkpoints)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, per_state[0], marker=".")
    ax.set(
        xlabel="agent steps", ylabel="score", title="Figure 2: deterministic agent, start state 0"
    )
    ax.xaxis.set_major_formatter(_steps_formatter())
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths += _save(fig, out_dir / "figure2_start_state")
    n = len(per_state)
    cols = int(math.ceil(math.sqrt(n)))
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(max(1.6 * cols, 7), 1.2 * rows + 0.6),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for k, ax in enumerate(axes.flat):
        if k < n:
            ax.plot(steps, per_state[k], linewidth=0.8)
            ax.set_title(str(k), fontsize=6, pad=2)
        else:
            ax.axis("off")
        ax.tick_params(labelsize=5)
        ax.xaxis.set_major_formatter(_steps_formatter())
    fig.suptitle("Figure 4: deterministic agent, score per start state over training")
    fig.tight_layout()
    return paths + _save(fig, out_dir / "figure4_start_states")


def divergence_figure(
    divergence: dict[str, dict],
    total_steps: int,
    out_dir: Path,
    labels: dict[str, str] | None = None,
) -> list[Path]:
    """Per group, when its runs part: in weights, loss chain and evaluation (a hollow
    marker at the end of training: never)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    groups = [g for g in GROUP_NAMES if g in divergence]
    styles = {"weights": ("o", "C0"), "losses": ("s", "C1"), "evaluation": ("^", "C2")}
    for offset, (name, (marker, colour)) in zip((-0.2, 0.0, 0.2), styles.items(), strict=True):
        for row, group in enumerate(groups):
            found = divergence[group][name]
            step = found["step"] if isinstance(found, dict) else found
            ax.scatter(
                [total_steps if step is None else step],
                [row + offset],
                marker=marker,
                color=colour,
                facecolors="none" if step is None else colour,
                zorder=3,
            )
        ax.scatter([], [], marker=marker, color=colour, label=name)  # a solid legend entry
    ax.set_yticks(range(len(groups)), [_wrapped((labels or {}).get(g, g)) for g in groups])
    ax.invert_yaxis()
    ax.set_xlim(-0.03 * total_steps, 1.05 * total_steps)
    ax.axvline(total_steps, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("agent step at which a group's runs first differ (hollow, at the end: never)")
    ax.xaxis.set_major_formatter(_steps_formatter())
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title("Where each source of nondeterminism enters")
    fig.tight_layout()
    return _save(fig, out_dir / "figure_divergence")


def probe_figure(study, out_dir: Path) -> list[Path]:
    """The blind-network probe per run: Q's spread across the start states (log scale) and
    the distinct greedy actions, over training, one colour per group."""
    plt = _plt()
    fig, (spread_ax, actions_ax) = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
    for colour, group in enumerate(GROUP_NAMES):
        for index, run in enumerate(r for r in study.get(group, []) if r.probe):
            steps = [p["step"] for p in run.probe]
            label = group if index == 0 else None
            spread_ax.plot(
                steps,
                [max(p["q_spread"], 1e-12) for p in run.probe],
                color=f"C{colour}",
                alpha=0.7,
                marker=".",
                label=label,
            )
            actions_ax.plot(
                steps,
                [p["greedy_actions"] for p in run.probe],
                color=f"C{colour}",
                alpha=0.7,
                marker=".",
            )
    spread_ax.set_yscale("log")
    spread_ax.set_ylabel("Q's spread across start states")
    actions_ax.set_ylabel("distinct greedy actions")
    actions_ax.yaxis.get_major_locator().set_params(integer=True)
    for ax in (spread_ax, actions_ax):
        ax.set_xlabel("agent steps")
        ax.xaxis.set_major_formatter(_steps_formatter())
        ax.grid(alpha=0.3)
    if spread_ax.get_legend_handles_labels()[0]:
        spread_ax.legend(fontsize=8, frameon=False)
    fig.suptitle("Is the network looking at the screen? (0 spread, 1 action: blind)")
    fig.tight_layout()
    return _save(fig, out_dir / "figure_probe")


def _steps_formatter():
    from matplotlib.ticker import EngFormatter

    return EngFormatter(sep="")  # 250k, 20M


def _save(fig, stem: Path) -> list[Path]:
    plt = _plt()
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix in (".png", ".pdf"):
        path = stem.with_suffix(suffix)
        fig.savefig(
            path,
            dpi=130,
            metadata={"CreationDate": None} if suffix == ".pdf" else {"Software": None},
        )
        paths.append(path)
    plt.close(fig)
    return paths
