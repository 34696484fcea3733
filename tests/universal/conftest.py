"""`--universal-backend triton`: the universal tests' layers, losses and optimizers on the GPU
backend's Triton kernels, run by Triton's interpreter with the spec's fma (cuda.py). How the
GPU's written order is checked on a machine without one; tests/universal/test_other_torch.py
runs it in the venv that has triton."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--universal-backend", choices=("numba", "triton"), default="numba")


def pytest_configure(config):
    if config.getoption("--universal-backend", "numba") != "triton":
        return
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    from reprodqn.universal import backend, cuda

    backend.use("triton")
    cuda.exact_interpreter()


@pytest.fixture
def kernel_backend(request) -> str:
    return request.config.getoption("--universal-backend")
