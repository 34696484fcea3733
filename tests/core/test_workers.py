"""How many jobs run at once: a launch setting from the environment, never a param."""

from __future__ import annotations

import pytest

from reprodqn.core import workers
from reprodqn.core.errors import InputError


def test_worker_count_comes_from_the_environment_not_params(monkeypatch):
    monkeypatch.setenv("REPRODQN_WORKERS", "3")
    assert workers.default_workers(threads=1) == 3
    monkeypatch.setenv("REPRODQN_WORKERS", "zero")
    with pytest.raises(InputError, match="REPRODQN_WORKERS=zero: expected a positive integer"):
        workers.default_workers(threads=1)


def test_a_lockstep_runs_game_workers_count_as_its_cores(monkeypatch):
    """Runs x game workers never oversubscribe: with K = 2 a lockstep training job takes 2
    cores (the trainer and its games never run at once), so 2 cores run one job."""
    monkeypatch.delenv("REPRODQN_WORKERS", raising=False)
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.setattr(workers, "visible_gpus", lambda: [])
    monkeypatch.setenv(workers.ACTOR_WORKERS_ENV, "2")
    assert workers.cores_per_training_job(threads=1, actors=4) == 2
    assert workers.default_workers(workers.cores_per_training_job(threads=1, actors=4)) == 1
    assert workers.cores_per_training_job(threads=1, actors=1) == 1  # K unused at N = 1
    assert workers.default_workers(workers.cores_per_training_job(threads=1, actors=1)) == 2
    monkeypatch.setenv(workers.ACTOR_WORKERS_ENV, "two")
    with pytest.raises(InputError, match="REPRODQN_ACTOR_WORKERS=two"):
        workers.actor_workers()
