"""The study's MLflow runs land in the store the environment names, whatever MLflow's
process-wide tracking URI pointed at before (a test process, or a notebook, may have set
another)."""

from __future__ import annotations

from reprodqn.config.params import load_params
from reprodqn.study import mlflow_store, tracking
from tests.helpers import PARAMS, TINY


def test_the_study_run_is_made_and_finished_in_the_named_store(tmp_path, monkeypatch):
    mlflow = mlflow_store.load_mlflow()
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'study.db'}")
    try:
        parent = tracking.study_run(load_params(PARAMS, TINY), "f" * 64)
        tracking.finish_study_run(parent)  # "Run not found" when its client was made first
        found = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'study.db'}").get_run(parent)
        assert found.info.status == "FINISHED"
    finally:
        mlflow.set_tracking_uri(before)
