"""The paper's results from a study's runs: Table 1, Figure 1, the per-start-state curves,
variance tests between groups, and a replicability verdict after Chen et al.

Score of a checkpoint = mean raw score over its evaluation episodes. Per run, "best" is
its highest checkpoint score over training and "final" its last; Table 1 gives the mean,
standard deviation and relative standard deviation of those over a group's runs.
Standard deviations are population ones (numpy's default, ddof=0); the paper does not say.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reprodqn import workspace
from reprodqn.config import GROUP_NAMES
from reprodqn.files import read_json, write_json, write_text

# Table 1 of the paper (Breakout, 5 agents per group, 20M steps)
PAPER_TABLE1 = {
    "best_mean": dict(zip(GROUP_NAMES, (146.7, 141.9, 33.6, 148.6, 131.2, 153.38), strict=True)),
    "best_std": dict(zip(GROUP_NAMES, (0.0, 8.8, 8.7, 17.0, 31.0, 32.96), strict=True)),
    "best_rsd": dict(zip(GROUP_NAMES, (0.0, 6.22, 25.96, 11.42, 23.61, 21.49), strict=True)),
    "final_mean": dict(zip(GROUP_NAMES, (146.7, 126.5, 29.0, 126.9, 108.6, 132.84), strict=True)),
    "final_std": dict(zip(GROUP_NAMES, (0.0, 15.7, 10.9, 21.4, 47.4, 8.89), strict=True)),
    "final_rsd": dict(zip(GROUP_NAMES, (0.0, 12.41, 37.65, 16.85, 43.61, 6.69), strict=True)),
}
METRICS = {
    "best_mean": "Average score (best)", "best_std": "Std (best)",
    "best_rsd": "Relative std (best), %", "final_mean": "Average score (final)",
    "final_std": "Std (final)", "final_rsd": "Relative std (final), %",
}
ALPHA = 0.1  # the paper's significance level for variance comparisons


@dataclass
class RunResult:
    group: str
    run: int
    hashes: list[dict]
    steps: list[int] = field(default_factory=list)
    scores: dict[int, list[float]] = field(default_factory=dict)  # step -> per-episode
    conditions: dict | None = None

    @property
    def curve(self) -> np.ndarray:
        return np.array([np.mean(self.scores[s]) for s in self.steps])

    @property
    def best(self) -> float:
        return float(self.curve.max())

    @property
    def final(self) -> float:
        return float(self.curve[-1])


def load_run(run_dir: Path, eval_dir: Path, group: str, run: int) -> RunResult:
    result = RunResult(group, run, workspace.read_hashes(run_dir))
    result.scores = workspace.eval_scores(eval_dir)
    result.steps = sorted(result.scores)
    if (run_dir / "conditions.json").exists():
        result.conditions = read_json(run_dir / "conditions.json", "run conditions")
    return result


def load_study(root: Path, groups, runs_per_group: int) -> dict[str, list[RunResult]]:
    """Every run of a workspace (or an unpacked bundle): runs/ and evaluations/."""
    root = Path(root)
    return {g: [load_run(workspace.run_dir(root / workspace.RUNS, g, r),
                         workspace.eval_dir(root / workspace.EVALUATIONS, g, r), g, r)
                for r in range(runs_per_group)] for g in groups}


# ---------------------------------------------------------------------------------------------
# Table 1 and variance tests


def summarize(values: list[float]) -> tuple[float, float, float]:
    """Mean, population std, relative std in percent."""
    mean = float(np.mean(values))
    std = float(np.std(values))
    rsd = 100.0 * std / abs(mean) if mean else (0.0 if std == 0 else math.inf)
    return mean, std, rsd


def table1(study: dict[str, list[RunResult]]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {m: {} for m in METRICS}
    for group, runs in study.items():
        evaluated = [r for r in runs if r.steps]
        if not evaluated:
            continue
        for kind in ("best", "final"):
            mean, std, rsd = summarize([getattr(r, kind) for r in evaluated])
            table[f"{kind}_mean"][group] = mean
            table[f"{kind}_std"][group] = std
            table[f"{kind}_rsd"][group] = rsd
    return table


def variance_tests(study: dict[str, list[RunResult]]) -> list[dict]:
    """Every pair of groups, best and final scores: the two-sided F-test of equal variances
    (consistent with the paper's reported findings) and Brown-Forsythe (Levene with
    medians), robust to non-normal scores."""
    from scipy import stats

    tests = []
    for kind in ("best", "final"):
        values = {g: [getattr(r, kind) for r in runs if r.steps] for g, runs in study.items()}
        for a, b in itertools.combinations([g for g in values if len(values[g]) >= 2], 2):
            x, y = np.array(values[a]), np.array(values[b])
            var_x, var_y = x.var(ddof=1), y.var(ddof=1)
            entry = {"scores": kind, "groups": [a, b], "n": [len(x), len(y)],
                     "variance": [float(var_x), float(var_y)]}
            if var_x == 0 and var_y == 0:
                entry.update(f_statistic=None, f_p=None, bf_statistic=None, bf_p=None,
                             note="both variances are zero")
            elif var_x == 0 or var_y == 0:
                entry.update(f_statistic=math.inf, f_p=0.0, bf_statistic=None, bf_p=None,
                             note="one variance is zero: the variances differ")
            else:
                f = var_x / var_y
                cdf = stats.f.cdf(f, len(x) - 1, len(y) - 1)
                bf = stats.levene(x, y, center="median")
                entry.update(f_statistic=float(f), f_p=float(2 * min(cdf, 1 - cdf)),
                             bf_statistic=float(bf.statistic), bf_p=float(bf.pvalue), note="")
            entry["significant"] = entry["f_p"] is not None and entry["f_p"] < ALPHA
            tests.append(entry)
    return tests


# ---------------------------------------------------------------------------------------------
# Replicability (Chen et al.: process metrics and evaluation metrics must be identical)


def first_divergence(reference: RunResult, other: RunResult, key: str) -> int | None:
    """The first checkpoint step at which `key` differs, or None if identical."""
    for a, b in itertools.zip_longest(reference.hashes, other.hashes):
        if a is None or b is None or a.get(key) != b.get(key):
            return (a or b)["step"]
    return None


def first_eval_divergence(reference: RunResult, other: RunResult) -> int | None:
    for step in sorted(set(reference.steps) | set(other.steps)):
        if reference.scores.get(step) != other.scores.get(step):
            return step
    return None


def verdict(study: dict[str, list[RunResult]]) -> dict:
    runs = [r for r in study.get("deterministic", []) if r.hashes]
    result = {"group": "deterministic", "runs": len(runs)}
    if len(runs) < 2:
        result.update(replicable=None, reason="fewer than two deterministic runs")
        return result
    checks = {"weights": "weights_sha256", "losses": "loss_chain_sha256"}
    first = runs[0]
    for name, key in checks.items():
        diverging = [(r.run, first_divergence(first, r, key)) for r in runs[1:]]
        diverging = [(run, step) for run, step in diverging if step is not None]
        result[name] = {"identical": not diverging,
                        "first_divergence": ({"run": diverging[0][0], "step": diverging[0][1]}
                                             if diverging else None)}
    diverging = [(r.run, first_eval_divergence(first, r)) for r in runs[1:]]
    diverging = [(run, step) for run, step in diverging if step is not None]
    result["evaluation"] = {"identical": not diverging,
                            "first_divergence": ({"run": diverging[0][0], "step": diverging[0][1]}
                                                 if diverging else None)}
    result["replicable"] = all(result[k]["identical"] for k in ("weights", "losses",
                                                                  "evaluation"))
    return result


def device_statement(study: dict[str, list[RunResult]]) -> dict:
    names = sorted({r.conditions.get("device_name", "?") for runs in study.values()
                    for r in runs if r.conditions})
    isas = sorted({isa_setting(r.conditions) for runs in study.values() for r in runs
                   if r.conditions})
    on_gpu = any(n != "cpu" for n in names)
    gpu_runs = [r for r in study.get("gpu", []) if r.hashes]
    det_runs = [r for r in study.get("deterministic", []) if r.hashes]
    same = bool(gpu_runs and det_runs) and all(
        r.hashes == det_runs[0].hashes for r in gpu_runs)
    if on_gpu:
        text = (f"The study ran on {', '.join(names)}. The gpu group allowed nondeterministic "
                "GPU operations.")
    else:
        text = ("The study ran on the CPU, which has no GPU nondeterminism to show: the gpu "
                "group turned deterministic algorithms off, but its CPU kernels are "
                "deterministic at a fixed thread count, so "
                + ("its hash chains equal the deterministic group's." if same else
                   "any difference from the deterministic group is not GPU nondeterminism."))
    if isas:
        text += f" CPU instruction set: {'; '.join(isas)}."
    return {"devices": names, "on_gpu": on_gpu, "gpu_group_equals_deterministic": same,
            "cpu_isa": isas, "text": text}


# ---------------------------------------------------------------------------------------------
# Figures


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure1(study, out_dir: Path) -> list[Path]:
    """Six panels: mean score over training per group, +-1 std shaded, same axes."""
    plt = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), sharex=True, sharey=True)
    for ax, group in zip(axes.flat, GROUP_NAMES, strict=True):
        runs = [r for r in study.get(group, []) if r.steps]
        ax.set_title(group)
        if not runs:
            ax.text(0.5, 0.5, "no runs", ha="center", transform=ax.transAxes)
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
    ax.set(xlabel="agent steps", ylabel="score",
           title="Figure 2: deterministic agent, start state 0")
    ax.xaxis.set_major_formatter(_steps_formatter())
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths += _save(fig, out_dir / "figure2_start_state")
    n = len(per_state)
    cols = int(math.ceil(math.sqrt(n)))
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(max(1.6 * cols, 7), 1.2 * rows + 0.6),
                             sharex=True,
                             sharey=True, squeeze=False)
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


def _steps_formatter():
    from matplotlib.ticker import EngFormatter

    return EngFormatter(sep="")  # 250k, 20M


def _save(fig, stem: Path) -> list[Path]:
    plt = _plt()
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix in (".png", ".pdf"):
        path = stem.with_suffix(suffix)
        fig.savefig(path, dpi=130, metadata={"CreationDate": None} if suffix == ".pdf"
                    else {"Software": None})
        paths.append(path)
    plt.close(fig)
    return paths


# ---------------------------------------------------------------------------------------------
# Writing


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if value == math.inf else f"{value:.2f}"


def table1_markdown(table) -> str:
    groups = list(GROUP_NAMES)
    lines = ["| metric | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for metric, label in METRICS.items():
        cells = [f"{_cell(table[metric].get(g))} ({_cell(PAPER_TABLE1[metric][g])})"
                 for g in groups]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table1_csv(table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "group", "ours", "paper"])
    for metric in METRICS:
        for group in GROUP_NAMES:
            ours = table[metric].get(group)
            writer.writerow([metric, group, "" if ours is None else repr(ours),
                             PAPER_TABLE1[metric][group]])
    return buffer.getvalue()


def learning_curves_csv(study) -> str:
    """One row per checkpoint step, one column per group: the mean over its runs."""
    curves = {}
    for group in GROUP_NAMES:
        runs = [r for r in study.get(group, []) if r.steps]
        if runs:
            curves[group] = dict(zip(runs[0].steps, np.mean([r.curve for r in runs], axis=0),
                                     strict=True))
    steps = sorted({s for curve in curves.values() for s in curve})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", *curves])
    for step in steps:
        writer.writerow([step, *(repr(float(c[step])) if step in c else "" for c in
                                 curves.values())])
    return buffer.getvalue()


def learning_curves_runs_csv(study) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["group", "run", "step", "mean_score"])
    for group, runs in study.items():
        for r in runs:
            for step, score in zip(r.steps, r.curve, strict=True):
                writer.writerow([group, r.run, step, repr(float(score))])
    return buffer.getvalue()


def write_report(study, out_dir: Path, scale_note: str = "") -> dict:
    out_dir = Path(out_dir)
    table = table1(study)
    tests = variance_tests(study)
    replicability = verdict(study)
    device = device_statement(study)
    figures = figure1(study, out_dir) + start_state_figures(study, out_dir)

    write_text(out_dir / "table1.csv", table1_csv(table))
    write_text(out_dir / "table1.md", table1_markdown(table) + "\n")
    write_text(out_dir / "learning_curves.csv", learning_curves_csv(study))
    write_text(out_dir / "learning_curves_runs.csv", learning_curves_runs_csv(study))
    write_json(out_dir / "variance_tests.json", tests)
    write_json(out_dir / "replicability.json", {**replicability, "device": device})
    metrics = {
        "table1": {g: {m: table[m].get(g) for m in METRICS} for g in GROUP_NAMES
                   if g in table["best_mean"]},
        "replicable": replicability.get("replicable"),
        "deterministic_identical": {k: replicability[k]["identical"]
                                    for k in ("weights", "losses", "evaluation")
                                    if k in replicability},
    }
    write_json(out_dir / "metrics.json", metrics)
    write_text(out_dir / "report.md", report_markdown(study, table, tests, replicability,
                                                      device, scale_note))
    return {"metrics": metrics, "figures": [str(p) for p in figures]}


def report_markdown(study, table, tests, replicability, device, scale_note: str) -> str:
    runs = sum(1 for runs in study.values() for r in runs if r.steps)
    lines = ["# Report: deterministic DQN on Breakout", ""]
    if scale_note:
        lines += [f"> {scale_note}", ""]
    lines += [f"{runs} evaluated runs. {device['text']}", "",
              "## Table 1", "",
              "Ours, with the paper's value in parentheses. Best: each run's highest "
              "checkpoint score; final: its last. Population standard deviations.", "",
              table1_markdown(table), "",
              "## Replicability (after Chen et al.)", ""]
    if replicability.get("replicable") is None:
        lines.append(f"Not assessed: {replicability.get('reason')}.")
    else:
        for name, label in (("weights", "weight hash chains"),
                            ("losses", "loss hash chains (process metrics)"),
                            ("evaluation", "evaluation results (evaluation metrics)")):
            entry = replicability[name]
            if entry["identical"]:
                lines.append(f"- {label}: identical across all {replicability['runs']} "
                             "deterministic runs")
            else:
                d = entry["first_divergence"]
                lines.append(f"- {label}: NOT identical; run {d['run']} first diverges from "
                             f"run 0 at checkpoint step {d['step']}")
        lines.append("")
        lines.append("Verdict: **replicable**" if replicability["replicable"] else
                     "Verdict: **not replicable**")
    lines += ["", "## Equality of variances between groups", "",
              f"Two-sided F-test of equal variances (significance at alpha = {ALPHA}, as in "
              "the paper) and Brown-Forsythe (Levene's test with medians).", "",
              "| scores | groups | F | p (F) | Brown-Forsythe W | p (BF) | note |",
              "|---|---|---|---|---|---|---|"]
    for t in tests:
        star = " *" if t["significant"] else ""
        lines.append(f"| {t['scores']} | {t['groups'][0]} vs {t['groups'][1]} | "
                     f"{_cell(t['f_statistic'])} | {_cell(t['f_p'])}{star} | "
                     f"{_cell(t['bf_statistic'])} | {_cell(t['bf_p'])} | {t['note']} |")
    lines += ["", "Figures: figure1.png/pdf, figure2_start_state.png/pdf, "
              "figure4_start_states.png/pdf.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Verify a workspace against another copy of the bundle's results


def verify(ours: Path, reference: Path, groups, runs_per_group: int) -> dict:
    from reprodqn.provenance import differences, fingerprint_fields

    mine = load_study(ours, groups, runs_per_group)
    theirs = load_study(reference, groups, runs_per_group)
    divergence = None
    compared = 0
    for group in groups:
        for a, b in zip(mine[group], theirs[group], strict=True):
            if not a.hashes and not b.hashes:
                continue
            compared += 1
            for key, label in (("weights_sha256", "weights"), ("loss_chain_sha256", "losses")):
                step = first_divergence(b, a, key)
                if step is not None and divergence is None:
                    divergence = {"group": group, "run": a.run, "step": step, "chain": label}
            step = first_eval_divergence(b, a)
            if step is not None and divergence is None:
                divergence = {"group": group, "run": a.run, "step": step, "chain": "evaluation"}
    conditions = {}
    for side, root in (("ours", ours), ("reference", reference)):
        path = workspace.conditions_path(root)
        conditions[side] = read_json(path, "conditions record") if path.exists() else None
    changed, numeric = [], []
    if conditions["ours"] and conditions["reference"]:
        changed = differences(conditions["ours"], conditions["reference"])
        numeric = differences(fingerprint_fields(conditions["ours"]),
                              fingerprint_fields(conditions["reference"]))
    return {"identical": divergence is None and compared > 0, "runs_compared": compared,
            "first_divergence": divergence, "conditions_differing": changed,
            "numeric_conditions_differing": numeric,
            "cpu_isa": {side: isa_setting(c) for side, c in conditions.items()}}


def isa_setting(conditions: dict | None) -> str:
    """The CPU instruction-set floor and what the machine offered, in words."""
    if not conditions:
        return "unknown (no conditions record)"
    floor = conditions.get("numerics", {}).get("cpu_isa", "native")
    machine = conditions.get("cpu", {}).get("torch_cpu_capability", "?")
    flags = conditions.get("cpu", {}).get("isa_flags", [])
    widest = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "below avx2"
    if floor == "native":
        return f"native (this machine's widest: {widest}, torch used {machine})"
    return f"pinned to {floor} (machine offers {widest}, torch used {machine})"
