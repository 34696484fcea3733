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
