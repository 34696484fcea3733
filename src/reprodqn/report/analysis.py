"""The paper's numbers from a study's runs: Table 1, variance tests between groups, and the
replicability verdict after Chen et al. (process and evaluation metrics identical).

Score of a checkpoint = mean raw score over its evaluation episodes. Per run, "best" is
its highest checkpoint score over training and "final" its last; Table 1 gives the mean,
standard deviation and relative standard deviation of those over a group's runs.
Standard deviations are population ones (numpy's default, ddof=0); the paper does not say.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reprodqn.config.study import GPU_ON_CPU, GPU_UNIVERSAL, GROUP_NAMES
from reprodqn.core import workspace

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
    "best_mean": "Average score (best)",
    "best_std": "Std (best)",
    "best_rsd": "Relative std (best), %",
    "final_mean": "Average score (final)",
    "final_std": "Std (final)",
    "final_rsd": "Relative std (final), %",
}
ALPHA = 0.1  # the paper's significance level for variance comparisons
# with 2 runs both absolute deviations from the median are equal: no spread within a group
BF_MIN_RUNS = 3


@dataclass
class RunResult:
    group: str
    run: int
    hashes: list[dict]
    steps: list[int] = field(default_factory=list)
    scores: dict[int, list[float]] = field(default_factory=dict)  # step -> per-episode
    conditions: dict | None = None
    start_states: dict | None = None  # what its evaluation recorded (None: sticky seeds)
    process: list[dict] = field(default_factory=list)  # process.jsonl records
    probe: list[dict] = field(default_factory=list)  # probe.csv: is Q looking at the screen?

    @property
    def curve(self) -> np.ndarray:
        return np.array([np.mean(self.scores[s]) for s in self.steps])

    @property
    def best(self) -> float:
        return float(self.curve.max())

    @property
    def final(self) -> float:
        return float(self.curve[-1])


# ---------------------------------------------------------------------------------------------
# Table 1 and variance tests


def _spread(values: list[float], ddof: int) -> tuple[float, float]:
    """Mean and variance; runs that scored alike have exactly their score and 0 (numpy's
    float mean of three 6.4s is 6.400000000000001, their variance 7.9e-31). Otherwise
    numpy's, so every report made before rebuilds to its own bytes (verify's report link)."""
    if len(set(values)) == 1:
        return float(values[0]), 0.0
    return float(np.mean(values)), float(np.var(values, ddof=ddof))


def summarize(values: list[float]) -> tuple[float, float, float]:
    """Mean, population std, relative std in percent."""
    mean, variance = _spread(values, ddof=0)
    std = math.sqrt(variance)
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
            var_x, var_y = _spread(values[a], ddof=1)[1], _spread(values[b], ddof=1)[1]
            entry: dict[str, Any] = {
                "scores": kind,
                "groups": [a, b],
                "n": [len(x), len(y)],
                "variance": [float(var_x), float(var_y)],
            }
            if var_x == 0 and var_y == 0:
                entry.update(
                    f_statistic=None,
                    f_p=None,
                    bf_statistic=None,
                    bf_p=None,
                    note="both variances are zero",
                )
            elif var_x == 0 or var_y == 0:
                entry.update(
                    f_statistic=math.inf,
                    f_p=0.0,
                    bf_statistic=None,
                    bf_p=None,
                    note="one variance is zero: the variances differ",
                )
            else:
                f = var_x / var_y
                cdf = stats.f.cdf(f, len(x) - 1, len(y) - 1)
                entry.update(
                    f_statistic=float(f),
                    f_p=float(2 * min(cdf, 1 - cdf)),
                    bf_statistic=None,
                    bf_p=None,
                    note="",
                )
                if min(len(x), len(y)) >= BF_MIN_RUNS:
                    bf = stats.levene(x, y, center="median")
                    entry.update(bf_statistic=float(bf.statistic), bf_p=float(bf.pvalue))
                else:
                    entry["note"] = f"Brown-Forsythe needs {BF_MIN_RUNS} runs per group"
            entry["significant"] = entry["f_p"] is not None and entry["f_p"] < ALPHA
            tests.append(entry)
    return tests


def f_threshold(runs: int) -> float:
    """The variance ratio two groups of `runs` runs each must exceed for the two-sided
    F-test to call them different at ALPHA: its power at this many runs."""
    from scipy import stats

    return float(stats.f.ppf(1 - ALPHA / 2, runs - 1, runs - 1))


# ---------------------------------------------------------------------------------------------
# Replicability (Chen et al.: process metrics and evaluation metrics must be identical)


CHAINS = workspace.CHAINS  # the chains two runs are compared on


def differs_by_design(run: RunResult) -> bool:
    """A run trained with its reduction order drawn from OS entropy (the gpu group's
    emulation of nondeterministic GPU kernels: on a CPU, or on any device in the universal
    numerics): no two trainings give its chain."""
    conditions = run.conditions or {}
    numerics = conditions.get("numerics", {})
    return numerics.get("cpu_reduction_order") == "random" and (
        conditions.get("device") == "cpu" or numerics.get("numerics") == "universal"
    )


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


def divergence(reference: RunResult, other: RunResult) -> dict[str, int | None]:
    """Per record (weights, losses, evaluation): the first checkpoint step at which `other`
    leaves `reference`, or None where it never does."""
    steps = {name: first_divergence(reference, other, key) for name, key in CHAINS.items()}
    steps["evaluation"] = first_eval_divergence(reference, other)
    return steps


def first_loss_divergence(reference: RunResult, other: RunResult) -> dict | None:
    """Where two runs' loss chains part, as sharply as process.jsonl records it (every
    log_every steps): the first record that differs, and the updates it covers."""
    previous = 0
    for a, b in itertools.zip_longest(reference.process, other.process):
        if a is None or b is None or a.get("loss_chain_sha256") != b.get("loss_chain_sha256"):
            record = a or b
            return {"step": record["step"], "updates": [previous + 1, record["updates"]]}
        previous = a["updates"]
    step = first_divergence(reference, other, "loss_chain_sha256")  # older runs: checkpoints
    return None if step is None else {"step": step, "updates": None}


def group_divergence(study: dict[str, list[RunResult]]) -> dict[str, dict]:
    """The paper's finding at any scale: per group, the first step at which its runs stop
    being identical to its run 0 in weights, in the loss chain and in evaluation results
    (None: never). Groups that vary a source of nondeterminism part; the deterministic
    group never does."""
    table = {}
    for group, runs in study.items():
        runs = [r for r in runs if r.hashes]
        if len(runs) < 2:
            continue
        chains = [divergence(runs[0], r) for r in runs[1:]]
        losses = [d for r in runs[1:] if (d := first_loss_divergence(runs[0], r))]
        table[group] = {
            "runs": len(runs),
            **{
                name: min((s for c in chains if (s := c[name]) is not None), default=None)
                for name in ("weights", "evaluation")
            },
            "losses": min(losses, key=lambda d: d["step"]) if losses else None,
        }
    return table


def verdict(study: dict[str, list[RunResult]]) -> dict:
    runs = [r for r in study.get("deterministic", []) if r.hashes]
    result: dict[str, Any] = {"group": "deterministic", "runs": len(runs)}
    if len(runs) < 2:
        result.update(replicable=None, reason="fewer than two deterministic runs")
        return result
    steps = [(r.run, divergence(runs[0], r)) for r in runs[1:]]
    for name in (*CHAINS, "evaluation"):
        diverging = [(run, found[name]) for run, found in steps if found[name] is not None]
        result[name] = {
            "identical": not diverging,
            "first_divergence": (
                {"run": diverging[0][0], "step": diverging[0][1]} if diverging else None
            ),
        }
    result["replicable"] = all(result[k]["identical"] for k in ("weights", "losses", "evaluation"))
    return result


def device_statement(study: dict[str, list[RunResult]]) -> dict:
    names = sorted(
        {
            r.conditions.get("device_name", "?")
            for runs in study.values()
            for r in runs
            if r.conditions
        }
    )
    isas = sorted(
        {isa_setting(r.conditions) for runs in study.values() for r in runs if r.conditions}
    )
    on_gpu = any(n != "cpu" for n in names)
    gpu_runs = [r for r in study.get("gpu", []) if r.hashes]
    det_runs = [r for r in study.get("deterministic", []) if r.hashes]
    same = bool(gpu_runs and det_runs) and all(r.hashes == det_runs[0].hashes for r in gpu_runs)
    emulated = bool(gpu_runs) and all(differs_by_design(r) for r in gpu_runs)
    label = GPU_UNIVERSAL if on_gpu else GPU_ON_CPU
    labels = {g: label if emulated and g == "gpu" else g for g in GROUP_NAMES}
    text = _device_text(names, on_gpu, emulated, "gpu" in study, same)
    if isas:
        text += f" CPU instruction set: {'; '.join(isas)}."
    return {
        "devices": names,
        "on_gpu": on_gpu,
        "gpu_group_equals_deterministic": same,
        # the name shipped reports carry (a GPU in the universal numerics emulates too)
        "gpu_emulated_on_cpu": emulated,
        "group_labels": labels,
        "cpu_isa": isas,
        "text": text,
    }


def _device_text(names: list[str], on_gpu: bool, emulated: bool, has_gpu: bool, same: bool):
    """Where the study ran, and what its gpu group did there, in words."""
    if on_gpu and emulated:
        return (
            f"The study ran on {', '.join(names)} in the universal numerics, whose kernels "
            "are deterministic on a GPU too. Its gpu group emulates nondeterministic GPU "
            "kernels as on a CPU: every update sums its minibatch's rows in an order drawn "
            "from OS entropy (compute.cpu_reduction_order: random)."
        )
    if on_gpu:
        return (
            f"The study ran on {', '.join(names)}. The gpu group allowed nondeterministic "
            "GPU operations."
        )
    if emulated:
        return (
            "The study ran on the CPU. Its gpu group emulates nondeterministic GPU "
            "kernels: every update sums its minibatch's rows in an order drawn from OS "
            "entropy (compute.cpu_reduction_order: random), so the loss and every weight "
            "gradient add the same terms in another order, as atomic adds on a GPU do."
        )
    if not has_gpu:
        return (
            "The study ran on the CPU, which has no GPU nondeterminism to show, and left "
            "the gpu group out."
        )
    return (
        "The study ran on the CPU, which has no GPU nondeterminism to show: the gpu "
        "group turned deterministic algorithms off, but its CPU kernels are "
        "deterministic at a fixed thread count, so "
        + (
            "its hash chains equal the deterministic group's."
            if same
            else "any difference from the deterministic group is not GPU nondeterminism."
        )
    )


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
