"""Shared fixtures: the real params.yaml shrunk to a few hundred steps (helpers.py holds
the constants and builders tests import)."""

from __future__ import annotations

import pytest

from tests.helpers import PARAMS, TINY


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
