"""The report's markdown, section by section: Table 1, where each group's runs part,
replicability, the variance tests, the departures from the defaults, the tests' power, the
conditions and the audit."""

from __future__ import annotations

import math
from collections.abc import Sequence

from reprodqn.config.games import display_name
from reprodqn.config.study import GROUP_NAMES
from reprodqn.determinism.replication_scope import where_it_replicates
from reprodqn.report.analysis import ALPHA, METRICS, PAPER_TABLE1, f_threshold


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if value == math.inf else f"{value:.2f}"


def table1_markdown(table, labels: dict[str, str] | None = None) -> str:
    groups = list(GROUP_NAMES)
    header = [(labels or {}).get(g, g) for g in groups]
    lines = ["| metric | " + " | ".join(header) + " |", "|---|" + "---|" * len(groups)]
    for metric, label in METRICS.items():
        cells = [
            f"{_cell(table[metric].get(g))} ({_cell(PAPER_TABLE1[metric][g])})" for g in groups
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def start_states_lines(study) -> list[str]:
    """Which start states the evaluations used (the environment group uses sticky seeds)."""
    import json

    from reprodqn.evaluation.start_states import describe

    used = sorted(
        {
            json.dumps(r.start_states, sort_keys=True)
            for runs in study.values()
            for r in runs
            if r.start_states
        }
    )
    if not used:
        return ["Start states: none recorded."]
    return [f"Start states: {describe(json.loads(record))}." for record in used]


def divergence_lines(parting: dict[str, dict], device: dict) -> list[str]:
    """The paper's central finding at any scale: where each group's runs part."""

    def cell(found) -> str:
        if found is None:
            return "never"
        if isinstance(found, dict):
            window = (
                f" (updates {found['updates'][0]:,}–{found['updates'][1]:,})"
                if found.get("updates")
                else ""
            )
            return f"step {found['step']:,}{window}"
        return f"step {found:,}"

    lines = [
        "## Where each source of nondeterminism enters",
        "",
        "For each group, the first agent step at which its runs stop being identical to "
        "its run 0: weights (per checkpoint), loss chain (per process.jsonl record, "
        "with the updates it covers) and evaluation results (per checkpoint).",
        "",
        "| group | runs | weights | loss chain | evaluation |",
        "|---|---|---|---|---|",
    ]
    labels = device.get("group_labels", {})
    for group in GROUP_NAMES:
        if group in parting:
            d = parting[group]
            lines.append(
                f"| {labels.get(group, group)} | {d['runs']} | {cell(d['weights'])} | "
                f"{cell(d['losses'])} | {cell(d['evaluation'])} |"
            )
    if "gpu" in parting and device.get("gpu_emulated_on_cpu"):
        where = "a GPU in the universal numerics" if device.get("on_gpu") else "a CPU"
        lines += [
            "",
            f"On {where} the gpu group's runs part through the order of their sums "
            "alone: each update takes its minibatch's rows in an order drawn from OS "
            "entropy, the mechanism of nondeterministic GPU kernels (atomic adds), "
            "with the same seeds and the same mathematics.",
        ]
    elif "gpu" in parting and not device["on_gpu"]:
        lines += [
            "",
            "The gpu group cannot part on a CPU: it only allows nondeterministic "
            "GPU kernels, and CPU kernels are deterministic at a fixed thread count "
            "and instruction-set floor (compute.cpu_reduction_order: random would "
            "emulate them).",
        ]
    return [*lines, "", "![Where each group's runs part](figure_divergence.png)", ""]


def report_markdown(
    study,
    table,
    tests,
    replicability,
    device,
    scale_note: str,
    parting: dict | None = None,
    audit: dict | None = None,
    algorithm: str = "DQN",
    probe_lines: Sequence[str] = (),
    design_lines: Sequence[str] = (),
    game: str = "breakout",
) -> str:
    runs = sum(1 for runs in study.values() for r in runs if r.steps)
    lines = [f"# Report: deterministic {algorithm} on {display_name(game)}", ""]
    if scale_note:
        lines += [f"> {scale_note}", ""]
    lines += [
        f"{runs} evaluated runs. {device['text']}",
        "",
        replicates_line(study),
        "",
        "## Table 1",
        "",
        "Ours, with the paper's value in parentheses. Best: each run's highest "
        "checkpoint score; final: its last. Population standard deviations.",
        "",
        table1_markdown(table, device.get("group_labels")),
        "",
        *design_lines,
        *start_states_lines(study),
        "",
        "![Figure 1: mean evaluation score per group](figure1.png)",
        "",
        *divergence_lines(parting or {}, device),
        *probe_lines,
        *replicability_lines(replicability),
        "",
        *variance_lines(tests),
        "",
        *power_lines(study),
        *conditions_lines(study),
        *audit_lines(audit),
        "## Figures",
        "",
        "![Figure 2: the deterministic agent on start state 0](figure2_start_state.png)",
        "",
        "![Figure 4: the deterministic agent on every start state](figure4_start_states.png)",
        "",
        "Each figure is also a PDF beside its PNG.",
        "",
    ]
    return "\n".join(lines)


def replicates_line(study) -> str:
    """Where the study's results replicate, from the conditions its runs recorded."""
    records = (r.conditions for runs in study.values() for r in runs if r.hashes)
    return f"**Where it replicates.** {where_it_replicates(records, 'These results')}"


def replicability_lines(replicability: dict) -> list[str]:
    """The deterministic group's chains and evaluations against each other (Chen et al.)."""
    lines = ["## Replicability (after Chen et al.)", ""]
    if replicability.get("replicable") is None:
        return [*lines, f"Not assessed: {replicability.get('reason')}."]
    for name, label in (
        ("weights", "weight hash chains"),
        ("losses", "loss hash chains (process metrics)"),
        ("evaluation", "evaluation results (evaluation metrics)"),
    ):
        entry = replicability[name]
        if entry["identical"]:
            lines.append(
                f"- {label}: identical across all {replicability['runs']} deterministic runs"
            )
        else:
            d = entry["first_divergence"]
            lines.append(
                f"- {label}: NOT identical; run {d['run']} first diverges from "
                f"run 0 at checkpoint step {d['step']}"
            )
    lines.append("")
    lines.append(
        "Verdict: **replicable**" if replicability["replicable"] else "Verdict: **not replicable**"
    )
    return lines


def variance_lines(tests: list[dict]) -> list[str]:
    lines = [
        "## Equality of variances between groups",
        "",
        f"Two-sided F-test of equal variances (significance at alpha = {ALPHA}, as in "
        "the paper) and Brown-Forsythe (Levene's test with medians).",
        "",
        "| scores | groups | F | p (F) | Brown-Forsythe W | p (BF) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in tests:
        star = " *" if t["significant"] else ""
        lines.append(
            f"| {t['scores']} | {t['groups'][0]} vs {t['groups'][1]} | "
            f"{_cell(t['f_statistic'])} | {_cell(t['f_p'])}{star} | "
            f"{_cell(t['bf_statistic'])} | {_cell(t['bf_p'])} | {t['note']} |"
        )
    return lines


def departure_lines(departures: Sequence[dict]) -> list[str]:
    """The study's departures from params.yaml's defaults (the paper's values, or the
    authors' code's where the paper gives none), one row each."""
    if not departures:
        return []
    lines = [
        "### Departures from the paper",
        "",
        "Every value this study ran with that differs from params.yaml's default (the "
        "paper's value, or the authors' code's where the paper gives none).",
        "",
        "| knob | this study | default | what it is |",
        "|---|---|---|---|",
    ]
    for d in departures:
        lines.append(f"| `{d['key']}` | {d['value']} | {d['default']} | {d['what']} |")
    left_out: list[str] = next((d["value"] for d in departures if d["key"] == "study.left_out"), [])
    if "gpu" in left_out:
        lines += [
            "",
            "The gpu group is left out: it differs from the deterministic group only "
            "in allowing nondeterministic GPU kernels, so on a CPU it would train the "
            "deterministic group's runs again (its Table 1 column shows only the "
            "paper's values).",
        ]
    return [*lines, ""]


def power_lines(study) -> list[str]:
    """How large a variance ratio the F-test can detect at this study's runs per group."""
    sizes = sorted({len([r for r in runs if r.steps]) for runs in study.values()} - {0, 1})
    if not sizes:
        return []
    n = sizes[0]
    return [
        f"With {n} runs per group the F-test has ({n - 1}, {n - 1}) degrees of freedom: "
        f"two nonzero variances are told apart at alpha = {ALPHA} only when one is more "
        f"than {f_threshold(n):.1f}x the other (the paper's 5 runs: "
        f"{f_threshold(5):.1f}x). A zero variance (the deterministic group) differs "
        "from any nonzero one.",
        "",
    ]


def conditions_lines(study) -> list[str]:
    """What the runs ran under, from their conditions records (one line per distinct
    fingerprint: a study that mixed conditions shows it)."""
    records: dict[str, dict] = {}
    for runs in study.values():
        for r in runs:
            if r.conditions and r.conditions.get("fingerprint"):
                records.setdefault(r.conditions["fingerprint"], r.conditions)
    lines = ["## Conditions", ""]
    if not records:
        return [*lines, "No conditions recorded.", ""]
    lines += [
        "| fingerprint | device | CPU | floor, threads | Python | torch | ale-py | numpy "
        "| commit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for digest, c in sorted(records.items()):
        packages = c.get("packages", {})
        numerics = c.get("numerics", {})
        commit = (c.get("bundle") or {}).get("commit") or "-"
        lines.append(
            f"| `{digest[:12]}` | {c.get('device_name', '?')} | "
            f"{c.get('cpu', {}).get('model', '?')} | {numerics.get('cpu_isa', '?')}, "
            f"{numerics.get('torch_threads', '?')} | "
            f"{c.get('python', {}).get('version', '?')} | {packages.get('torch')} | "
            f"{packages.get('ale-py')} | {packages.get('numpy')} | `{commit[:12]}` |"
        )
    return [
        *lines,
        "",
        "The full records: each run's `conditions.json`, "
        "`results/conditions.json` and the SBOM `results/sbom.cdx.json`.",
        "",
    ]


def audit_lines(audit: dict | None) -> list[str]:
    """The nondeterminism audit's finding (results/audit.json), quoted."""
    if not audit:
        return []
    return [
        "### Nondeterminism audit",
        "",
        audit["summary"].removeprefix("audit: ") + ".",
        "",
        "Every op with its documentation and every setting: `results/audit.json` "
        f"(conditions fingerprint `{str(audit.get('conditions_fingerprint'))[:12]}`).",
        "",
    ]
