"""Shared fixtures: the real params.yaml shrunk to a few hundred steps (helpers.py holds
the constants and builders tests import)."""

from __future__ import annotations

import os

import pytest

from tests.helpers import PARAMS, TINY

# Two test workers share two cores, so a run at compute.threads=2 always has a busy core
# beside it: OpenMP's threads spinning at each barrier (libgomp's default) made those runs
# 3x slower, and burnt CPU the other worker needed. Passive waiting changes no bit (threads
# split outputs, never a sum); set before any worker or subprocess loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture
def tiny_params():
    from reprodqn.config.params import load_params

    def make(*extra: str):
        return load_params(PARAMS, [*TINY, *extra])

    return make


@pytest.fixture(autouse=True)
def _no_generator_watch_across_tests():
    """exact.setup() watches the global generators for the rest of its process, which in
    a test run is pytest's: not into the next test."""
    yield
    from reprodqn.determinism import global_generators
    from reprodqn.universal import record

    global_generators.stop()
    record.forget()  # the numerics a test set its process up in: not the next test's
