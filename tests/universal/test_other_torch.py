"""The universal probe under a second torch version, in its own venv: torch 2.11.0, whose
oneDNN parts the standard chain from the lock's 2.13.0, must give the probe's golden hash.
The venv is built by tools/other_torch/build.sh (CI does, before `pytest -m other_torch`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

VENV = Path(os.environ.get("REPRODQN_OTHER_TORCH", ROOT / "build" / "torch-2.11"))


@pytest.mark.other_torch
def test_the_probe_gives_its_golden_hash_under_another_torch():
    python = VENV / "bin" / "python"
    assert python.exists(), f"no venv at {VENV}: run tools/other_torch/build.sh {VENV}"
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    shown = subprocess.run(
        [str(python), str(ROOT / "tools" / "universal_probe.py"), "--threads", "2"],
        check=True,
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
    )
    ours, golden = (
        json.loads(shown.stdout),
        json.loads((ROOT / "tests/golden/universal-probe.json").read_text()),
    )
    import torch

    assert ours["torch"].split("+")[0] != torch.__version__.split("+")[0]
    assert (ours["sha256"], ours["greedy"]) == (golden["sha256"], golden["greedy"]), ours["torch"]
