"""Shared fixtures: the real params.yaml shrunk to a few hundred steps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"

# A smoke-sized run of the real trainer: a few hundred steps, updates from step 200.
TINY = [
    "agent.network=nips",
    "agent.batch_size=8",
    "agent.target_sync_every=100",
    "agent.epsilon_decay_steps=300",
    "replay.capacity=1000",
    "replay.learning_starts=200",
    "train.steps=600",
    "train.checkpoint_every=200",
    "train.resume_every=300",
    "train.log_every=100",
]


@pytest.fixture
def tiny_params():
    from reprodqn.config import load_params

    def make(*extra: str):
        return load_params(PARAMS, [*TINY, *extra])

    return make


def train_tiny(params, run_dir: Path, group: str = "deterministic", run: int = 0) -> list:
    """Train to completion in this process; returns the hashes.jsonl lines."""
    from reprodqn.config import resolve_run
    from reprodqn.rundir import read_hashes
    from reprodqn.train import train

    for _ in train(resolve_run(params, group, run), run_dir):
        pass
    return read_hashes(run_dir)


def cli_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    return env
