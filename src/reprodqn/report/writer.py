"""The report stage: Table 1, the figures, the variance tests and the replicability verdict
of a study's runs (report.study_records reads them) written to reports/ (markdown with its figures
inline, one self-contained HTML page, CSV, JSON)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reprodqn.config.study import GROUP_NAMES
from reprodqn.core.atomic import write_text
from reprodqn.evaluation import blindness
from reprodqn.report import html
from reprodqn.report.analysis import (
    METRICS,
    PAPER_TABLE1,
    device_statement,
    group_divergence,
    table1,
    variance_tests,
    verdict,
)
from reprodqn.report.figures import divergence_figure, figure1, probe_figure, start_state_figures
from reprodqn.report.sections import departure_lines, report_markdown, table1_markdown


def scale_note(params) -> str:
    """A warning above Table 1 when the study ran below the paper's scale."""
    if params.train.steps < 20_000_000 or params.evaluation.episodes < 100:
        return (
            f"Reduced scale: {params.train.steps:,} training steps, "
            f"{params.study.runs_per_group} runs per group, {params.evaluation.episodes} "
            f"evaluation episodes capped at {params.evaluation.max_frames:,} frames. "
            "The paper's numbers are for 20M steps, 5 runs, 100 episodes."
        )
    return ""


def table1_csv(table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "group", "ours", "paper"])
    for metric in METRICS:
        for group in GROUP_NAMES:
            ours = table[metric].get(group)
            writer.writerow(
                [metric, group, "" if ours is None else repr(ours), PAPER_TABLE1[metric][group]]
            )
    return buffer.getvalue()


def learning_curves_csv(study) -> str:
    """One row per checkpoint step, one column per group: the mean over its runs."""
    curves = {}
    for group in GROUP_NAMES:
        runs = [r for r in study.get(group, []) if r.steps]
        if runs:
            curves[group] = dict(
                zip(runs[0].steps, np.mean([r.curve for r in runs], axis=0), strict=True)
            )
    steps = sorted({s for curve in curves.values() for s in curve})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", *curves])
    for step in steps:
        writer.writerow(
            [step, *(repr(float(c[step])) if step in c else "" for c in curves.values())]
        )
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


def _metrics(table: dict, replicability: dict, parting: dict) -> dict:
    """metrics.json: Table 1, the verdict and where each group parts, for DVC and MLflow."""
    return {
        "table1": {
            g: {m: table[m].get(g) for m in METRICS} for g in GROUP_NAMES if g in table["best_mean"]
        },
        "replicable": replicability.get("replicable"),
        "deterministic_identical": {
            k: replicability[k]["identical"]
            for k in ("weights", "losses", "evaluation")
            if k in replicability
        },
        "first_divergence_step": {
            g: {k: (v["step"] if isinstance(v, dict) else v) for k, v in d.items() if k != "runs"}
            for g, d in parting.items()
        },
    }


def report_arguments(params, root: Path) -> dict:
    """What the report says besides the runs, from a study's params and its audit record:
    the same for the report stage and for `verify BUNDLE`, which rebuilds the report."""
    from reprodqn.config.explain import departures
    from reprodqn.config.variants import algorithm_name
    from reprodqn.core import workspace
    from reprodqn.core.atomic import read_json

    audit_path = Path(root) / workspace.RESULTS / workspace.AUDIT
    return {
        "scale_note": scale_note(params),
        "audit": read_json(audit_path, "audit record") if audit_path.exists() else None,
        "algorithm": algorithm_name(params),
        "optimizer": params.agent.optimizer,
        "departures": departures(params),
        "game": params.env.game,
    }


def report_texts(
    study,
    scale_note: str = "",
    audit: dict | None = None,
    algorithm: str = "DQN",
    optimizer: str = "rmsprop",
    departures: Sequence[dict] = (),
    game: str = "breakout",
) -> dict[str, str]:
    """Every report file but the figures and the HTML page, by name, as written: Table 1,
    learning curves, variance tests, the verdict, where groups part, metrics, report.md.
    `departures`: config.explain.departures of its params, named in the report."""
    table = table1(study)
    tests = variance_tests(study)
    replicability = verdict(study)
    device = device_statement(study)
    parting = group_divergence(study)
    labels = device["group_labels"]
    markdown = report_markdown(
        study,
        table,
        tests,
        replicability,
        device,
        scale_note,
        parting,
        audit,
        algorithm,
        blindness.report_lines(study, optimizer),
        departure_lines(departures),
        game,
    )
    return {
        "table1.csv": table1_csv(table),
        "table1.md": table1_markdown(table, labels) + "\n",
        "learning_curves.csv": learning_curves_csv(study),
        "learning_curves_runs.csv": learning_curves_runs_csv(study),
        "variance_tests.json": _json(tests),
        "replicability.json": _json({**replicability, "device": device}),
        "divergence.json": _json(parting),
        "metrics.json": _json(_metrics(table, replicability, parting)),
        "report.md": markdown,
    }


def _json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"  # as core.atomic.write_json


def write_report(study, out_dir: Path, **arguments) -> dict:
    """Table 1, figures, variance tests and the report (markdown and HTML) of a study
    (`arguments`: report_texts's, report_arguments gives a study's)."""
    out_dir = Path(out_dir)
    texts = report_texts(study, **arguments)
    device = device_statement(study)
    parting = group_divergence(study)
    total = max(
        (h[-1]["step"] for runs in study.values() for r in runs if (h := r.hashes)), default=0
    )
    labels = device["group_labels"]
    figures = (
        figure1(study, out_dir, labels)
        + start_state_figures(study, out_dir)
        + divergence_figure(parting, total, out_dir, labels)
        + probe_figure(study, out_dir)
    )
    for name, text in texts.items():
        write_text(out_dir / name, text)
    write_text(out_dir / "report.html", html.render(texts["report.md"], out_dir))
    return {"metrics": json.loads(texts["metrics.json"]), "figures": [str(p) for p in figures]}
