"""The MLflow store: one experiment per study workspace, one MLflow run per group x run
(params, tags, metrics over steps, artifacts), one study run with the report.

The default store is a SQLite file at the workspace root, addressed by absolute path so
runs launched from worker processes or a `dvc exp --temp` copy land in the same store;
MLFLOW_TRACKING_URI overrides it for a shared server. Creating the SQLite schema is not
safe under concurrent first use (measured: it can leave the file unusable), so it happens
under a file lock. MLflow runs are found again by tags, so a stage that runs twice adds
nothing twice.

The experiment is marked as model training (so the UI opens on its runs, not its GenAI
pages) and describes itself; the study run is the parent of its group x run runs, so the
runs table folds by study and groups by the `reprodqn.group` tag.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from reprodqn.config.study import group_label
from reprodqn.config.variants import algorithm_name
from reprodqn.core import workspace

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no phoning home from a study

TAG = "reprodqn."


SYSTEM_METRICS_INTERVAL = 5.0  # seconds


PARENT_ENV = "REPRODQN_MLFLOW_PARENT_RUN"  # the study run a job's run nests under


KIND = "custom_model_development"  # what the UI's own experiment-type selector writes


def enabled() -> bool:
    return os.environ.get("REPRODQN_TRACKING", "1") != "0"


def workspace_root(start: Path | None = None) -> Path:
    """The study workspace: the DVC root, also from inside a `dvc exp --temp` copy."""
    here = (start or Path.cwd()).resolve()
    text = str(here)
    marker = f"{os.sep}.dvc{os.sep}tmp{os.sep}exps{os.sep}"
    if marker in text:
        return Path(text.split(marker)[0])
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dvc.yaml").exists() or (candidate / ".dvc").is_dir():
            return candidate
    return here


def tracking_uri(root: Path | None = None) -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(root or workspace_root()) / 'mlflow.db'}"


def experiment_name(root: Path | None = None) -> str:
    default = f"reprodqn-{(root or workspace_root()).name}"
    return os.environ.get("REPRODQN_MLFLOW_EXPERIMENT") or default


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_mlflow():
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return mlflow


def experiment_id(root: Path | None = None) -> str:
    """Connect to the store (creating its schema under a lock) and get-or-create the
    study's experiment, with artifacts beside the SQLite file, its kind and description."""
    mlflow = load_mlflow()
    root = root or workspace_root()
    uri = tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    database = Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None
    lock = database.with_name(database.name + ".lock") if database else None
    with file_lock(lock) if lock else contextlib.nullcontext():
        experiment = get_or_create(client, experiment_name(root), database)
        wanted = {"mlflow.experimentKind": KIND, "mlflow.note.content": description(root)}
        for key, value in wanted.items():
            if experiment.tags.get(key) != value:
                client.set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


def get_or_create(client, name: str, database: Path | None):
    from mlflow.exceptions import MlflowException

    for _ in range(10):
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found
        try:  # artifacts beside the database, wherever the study workspace is
            location = (database.parent / "mlartifacts").as_uri() if database else None
            return client.get_experiment(client.create_experiment(name, artifact_location=location))
        except MlflowException as exc:  # another process created it first
            if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise
            time.sleep(0.2)
    raise RuntimeError(f"could not create MLflow experiment {name!r}")


def description(root: Path) -> str:
    """The experiment's description (markdown in the UI): what, where the report is, how
    to verify."""
    return (
        "**reprodqn**: a deterministic DQN on Atari Breakout and the six-group sensitivity "
        "study of Nagarajan, Warnell & Stone (2019), *Deterministic Implementations for "
        "Reproducibility in Deep Reinforcement Learning*.\n\n"
        "Each `study` run is the parent of its group x run runs (expand it in the table; "
        f"`Group by` the tag `{TAG}group` to compare groups); `eval_mean_score` is the mean "
        "evaluation score per checkpoint, `loss` and `epsilon` the process metrics.\n\n"
        "The report is in the study run's artifacts under `report/` (`report.html` opens in "
        f"a browser; Table 1 beside the paper's numbers, Figure 1, the variance tests, the "
        f"replicability verdict) and in the workspace at `{root / workspace.REPORTS}`.\n\n"
        "To verify: every run's `hashes.jsonl` is its hash chain (weights at every "
        "checkpoint, every loss); `reprodqn verify --reference OTHER` compares this "
        "workspace with another copy or an unpacked bundle, run by run, bit for bit."
    )


def ui_link(base: str, experiment: str) -> str:
    """The experiment's runs in the UI's model-training mode (MLflow 3.17 opens an
    experiment in the mode of its GenAI/Model training switch, whatever its kind)."""
    return f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"


def print_links(uri: str, base: str) -> None:
    """One line per reprodqn experiment in the store: its name and its runs page."""
    client = load_mlflow().MlflowClient(tracking_uri=uri)
    for experiment in client.search_experiments():
        if experiment.tags.get("mlflow.experimentKind") == KIND:
            print(f"{experiment.name}: {ui_link(base, experiment.experiment_id)}")


def find_run(client, experiment: str, tags: dict[str, str]):
    query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())
    found = client.search_runs(
        [experiment], filter_string=query, max_results=1, order_by=["attributes.start_time ASC"]
    )
    return found[0] if found else None


def flatten(prefix: str, value, out: dict) -> dict:
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(f"{prefix}.{key}" if prefix else key, item, out)
    else:
        out[prefix] = value
    return out


class RunTracker:
    """The MLflow run of one group x run, found again by its identity tags."""

    def __init__(self, config, fingerprint: str, conditions: dict | None):
        mlflow = load_mlflow()
        from mlflow.entities import RunTag

        self.experiment = experiment_id()  # first: it points MLflow at the study's store
        self.client = mlflow.MlflowClient()
        identity = {
            f"{TAG}kind": "run",
            f"{TAG}group": config.group,
            f"{TAG}run": str(config.run),
            f"{TAG}config_digest": config.digest(),
            f"{TAG}fingerprint": fingerprint,
        }
        parent = (
            {"mlflow.parentRunId": os.environ[PARENT_ENV]} if os.environ.get(PARENT_ENV) else {}
        )
        existing = find_run(self.client, self.experiment, identity)
        if existing is not None:
            self.run_id = existing.info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            for key, value in parent.items():  # a later study stage re-nests it
                if existing.data.tags.get(key) != value:
                    self.client.set_tag(self.run_id, key, value)
            return
        seeds = config.seeds.model_dump()
        device = (conditions or {}).get("device", "cpu").split(":")[0]
        tags = {
            **identity,
            **parent,
            "mlflow.runName": f"{config.group}/{config.run}",
            f"{TAG}group_label": group_label(
                config.group,
                device,
                config.compute.cpu_reduction_order,
                config.compute.numerics,
            ),
            f"{TAG}algorithm": algorithm_name(config),
            f"{TAG}seeds": json.dumps(seeds, sort_keys=True),
            f"{TAG}device": (conditions or {}).get("device_name", "unknown"),
            f"{TAG}git_commit": str(((conditions or {}).get("bundle") or {}).get("commit")),
        }
        run = self.client.create_run(self.experiment, tags=tags)
        self.run_id = run.info.run_id
        params = flatten("", config.model_dump(mode="json", exclude={"group", "run"}), {})
        from mlflow.entities import Param

        self.client.log_batch(
            self.run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(f"{TAG}seed.{k}", str(v)) for k, v in seeds.items()],
        )

    def last_step(self, key: str) -> int:
        history = self.client.get_metric_history(self.run_id, key)
        return max((m.step for m in history), default=-1)

    def log_metrics(self, rows: list[tuple[str, float | None, int]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), now, int(step))
            for key, value, step in rows
            if value is not None
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def log_artifacts(self, paths: list[Path], folder: str | None = None) -> None:
        for path in paths:
            if Path(path).exists():
                self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, f"{TAG}{key}", value)

    def get_tag(self, key: str) -> str | None:
        return self.client.get_run(self.run_id).data.tags.get(f"{TAG}{key}")

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


class SystemMetrics:
    """CPU, memory, disk (and GPU with nvidia-ml-py) sampled into a run while it works.
    MLflow's monitor drops the samples of an interval cut short by its shutdown, so a
    final sample is recorded on finish: a short run still has system metrics."""

    def __init__(self, tracker: RunTracker):
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        resumed = bool(
            tracker.client.get_metric_history(tracker.run_id, "system/cpu_utilization_percentage")
        )
        self.monitor = SystemMetricsMonitor(
            tracker.run_id,
            sampling_interval=SYSTEM_METRICS_INTERVAL,
            samples_before_logging=1,
            resume_logging=resumed,
            tracking_uri=tracking_uri(),
        )
        self.monitor.start()

    def finish(self) -> None:
        self.monitor.finish()
        self.monitor.collect_metrics()
        self.monitor.publish_metrics(self.monitor.aggregate_metrics())
        self.monitor.mlflow_logger.flush()
