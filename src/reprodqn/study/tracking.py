"""What each stage logs to MLflow: a training run's params, metrics over steps and
artifacts, an evaluation's scores and probe, the study run with the report. The store
itself (where it is, its experiment, runs found again by tags) is mlflow_store's."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from reprodqn.config.params import RUN_SECTIONS
from reprodqn.config.variants import algorithm_name
from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.digests import json_digest
from reprodqn.core.events import Finished, ProcessRecord, Started
from reprodqn.evaluation.blindness import read_probe
from reprodqn.study import mlflow_store
from reprodqn.study.mlflow_store import TAG

# ---------------------------------------------------------------------------------------------
# Consumers: a run's training events and its evaluation, into its MLflow run


def track_training(events, config, run_dir: Path):
    """Pass training events through, logging them to the run's MLflow run."""
    if not mlflow_store.enabled():
        yield from events
        return
    tracker = monitor = None
    last_logged = -1
    status = "FAILED"
    try:
        for event in events:
            if isinstance(event, Started):
                recorded = read_json(run_dir / workspace.RUN_CONFIG, "run config")
                conditions = read_json(run_dir / workspace.CONDITIONS, "run conditions")
                tracker = mlflow_store.RunTracker(config, recorded["fingerprint"], conditions)
                last_logged = tracker.last_step("epsilon")
                monitor = mlflow_store.SystemMetrics(tracker)
            elif isinstance(event, ProcessRecord) and tracker and event.step > last_logged:
                record = event.record
                scores = record["game_scores"]
                tracker.log_metrics(
                    [
                        ("loss", record["loss"], event.step),
                        ("epsilon", record["epsilon"], event.step),
                        ("steps_per_second", record["steps_per_second"], event.step),
                        (
                            "train_game_score",
                            sum(scores) / len(scores) if scores else None,
                            event.step,
                        ),
                    ]
                )
            elif isinstance(event, Finished) and tracker:
                tracker.log_artifacts(
                    [
                        run_dir / name
                        for name in (
                            workspace.HASHES,
                            workspace.RUN_CONFIG,
                            workspace.CONDITIONS,
                            workspace.DETERMINISM,
                        )
                    ]
                )
                tracker.log_artifacts([workspace.sbom_path(), workspace.conditions_path()], "study")
            yield event
        status = "FINISHED"
    finally:
        if monitor is not None:
            monitor.finish()
        if tracker is not None:
            tracker.finish(status)


def track_evaluation(config, run_dir: Path, out_dir: Path, digest: str) -> None:
    """Log a run's evaluation (mean score per checkpoint, eval.csv; the blind-network probe's
    Q spread, greedy actions and max-Q per checkpoint, probe.csv) to its MLflow run, once
    per evaluation digest."""
    if not mlflow_store.enabled():
        return
    recorded = read_json(run_dir / workspace.RUN_CONFIG, "run config")
    conditions = read_json(run_dir / workspace.CONDITIONS, "run conditions")
    tracker = mlflow_store.RunTracker(config, recorded["fingerprint"], conditions)
    try:
        if tracker.get_tag("eval_digest") != digest:
            scores = workspace.eval_scores(out_dir)
            probes = read_probe(out_dir)
            tracker.log_metrics(
                [("eval_mean_score", sum(v) / len(v), step) for step, v in sorted(scores.items())]
                + [
                    (f"probe_{key}", r[key], r["step"])
                    for r in probes
                    for key in ("q_spread", "greedy_actions", "max_q")
                ]
            )
            tracker.log_artifacts(
                [
                    out_dir / workspace.EVAL_CSV,
                    out_dir / workspace.EVAL_JSON,
                    *([out_dir / workspace.PROBE_CSV] if probes else []),
                ]
            )
            tracker.set_tag("eval_digest", digest)
    finally:
        tracker.finish()


# ---------------------------------------------------------------------------------------------
# The study run


def study_identity(params, fingerprint: str | None) -> dict[str, str]:
    """The tags that find a study's run again: its training params and conditions (the
    evaluation and report knobs change its report, not which runs it holds)."""
    body = params.model_dump(mode="json", include={*RUN_SECTIONS, "study"})
    body["train"].pop("resume_every", None)
    digest = json_digest([body, fingerprint])
    return {f"{TAG}kind": "study", f"{TAG}study_digest": digest}


def study_run(params, fingerprint: str | None) -> str:
    """Get or create the study run (RUNNING while a stage works), the parent of its group x
    run runs."""
    experiment = mlflow_store.experiment_id()  # first: it points MLflow at the study's store
    client = mlflow_store.load_mlflow().MlflowClient()
    identity = study_identity(params, fingerprint)
    existing = mlflow_store.find_run(client, experiment, identity)
    if existing is not None:
        client.update_run(existing.info.run_id, status="RUNNING")
        return existing.info.run_id
    tags = {
        **identity,
        "mlflow.runName": "study",
        f"{TAG}algorithm": algorithm_name(params),
        f"{TAG}groups": ",".join(params.study.studied_groups()),
        f"{TAG}runs_per_group": str(params.study.runs_per_group),
        "mlflow.note.content": f"The study: {len(params.study.studied_groups())} groups, "
        f"{len(params.study.run_ids())} runs; the report is "
        "under this run's artifacts, report/report.html.",
    }
    return client.create_run(experiment, tags=tags).info.run_id


def finish_study_run(run_id: str) -> None:
    mlflow_store.load_mlflow().MlflowClient().set_terminated(run_id)


def log_study(params, fingerprint: str | None, metrics: dict, files: list[Path]) -> str:
    """Table 1, the figures, the verdict and report.html into the study run. A digest of the
    report's content is its tag, so an unchanged report is logged once."""
    run_id = study_run(params, fingerprint)
    client = mlflow_store.load_mlflow().MlflowClient()
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(Path(path).name.encode())
        digest.update(
            Path(path).read_bytes() if Path(path).suffix in (".csv", ".md", ".json") else b""
        )
    if client.get_run(run_id).data.tags.get(f"{TAG}report_digest") == digest.hexdigest():
        finish_study_run(run_id)
        return run_id
    rows = []
    for group, values in (metrics.get("table1") or {}).items():
        for name, value in values.items():
            if value is not None and value == value and abs(value) != float("inf"):
                rows.append((f"{group}/{name}", value))
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in rows],
        tags=[
            RunTag(f"{TAG}replicable", str(metrics.get("replicable"))),
            RunTag(f"{TAG}report_digest", digest.hexdigest()),
        ],
    )
    for path in files:
        client.log_artifact(run_id, str(path), artifact_path="report")
    finish_study_run(run_id)
    return run_id
