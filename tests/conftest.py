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
