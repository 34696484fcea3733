"""Shared fixtures: the real params.yaml shrunk to a few hundred steps."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"

# A smoke-sized run of the real trainer: a few hundred steps, updates from step 200; as a
# params overlay (for whole pipelines) and as --set overrides (for single runs).
TINY_OVERLAY = {
    "agent": {"network": "nips", "batch_size": 8, "target_sync_every": 100,
              "epsilon_decay_steps": 300},
    "replay": {"capacity": 1000, "learning_starts": 200},
    "train": {"steps": 600, "checkpoint_every": 200, "resume_every": 300, "log_every": 100},
}
TINY = [f"{section}.{key}={value}" for section, values in TINY_OVERLAY.items()
        for key, value in values.items()]


@pytest.fixture
def tiny_params():
    from reprodqn.config import load_params

    def make(*extra: str):
        return load_params(PARAMS, [*TINY, *extra])

    return make


def train_tiny(params, run_dir: Path, group: str = "deterministic", run: int = 0) -> list:
    """Train to completion in this process; returns the hashes.jsonl lines."""
    from reprodqn.config import resolve_run
    from reprodqn.train import train
    from reprodqn.workspace import read_hashes

    for _ in train(resolve_run(params, group, run), run_dir):
        pass
    return read_hashes(run_dir)


def cli_env(**extra: str) -> dict:
    """The environment for a subprocess: this venv's tools first on PATH."""
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env
