"""The universal golden chain, probe and smoke reference under a second torch version, in
its own venv: torch 2.11.0, whose oneDNN parts the standard chain from the lock's 2.13.0,
must give the tiny training run's golden chain (the game included), the probe's golden hash
and reference/smoke's spot-check. The venv is built by tools/other_torch/build.sh
(CI does, before `pytest -m other_torch`)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers import ROOT

# a relative path is the checkout's (CI's is build/torch-2.11); the runs below start elsewhere
VENV = ROOT / os.environ.get("REPRODQN_OTHER_TORCH", "build/torch-2.11")


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


@pytest.mark.other_torch
def test_the_tiny_universal_run_gives_the_golden_chain_under_another_torch(tmp_path):
    from tests.universal.test_universal_chain import CHAIN, OVERRIDES

    python = VENV / "bin" / "python"
    assert python.exists(), f"no venv at {VENV}: run tools/other_torch/build.sh {VENV}"
    argv = [str(python), "-m", "reprodqn.cli", "train", "--group", "deterministic", "--run", "0"]
    argv += ["--params", str(ROOT / "params.yaml"), "--runs-dir", str(tmp_path)]
    for item in OVERRIDES:
        argv += ["--set", item]
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": "0"}
    subprocess.run(argv, check=True, capture_output=True, env=environment, cwd=tmp_path)
    conditions = json.loads((tmp_path / "deterministic/0/conditions.json").read_text())
    assert conditions["packages"]["torch"].startswith("2.11")
    ours = (tmp_path / "deterministic" / "0" / "hashes.jsonl").read_text().splitlines()
    assert ours == CHAIN.read_text().splitlines()


@pytest.mark.other_torch
def test_the_gpu_kernels_are_the_spec_under_tritons_interpreter():
    """cuda.py's Triton kernels (the GPU backend) run on the CPU by Triton's interpreter with
    the spec's fma: every layer, gradient and optimizer test of the CPU's kernels passes on
    them too, bit for bit against reference.py."""
    python = VENV / "bin" / "python"
    assert python.exists(), f"no venv at {VENV}: run tools/other_torch/build.sh {VENV}"
    suites = ["tests/universal/test_kernels.py", "tests/universal/test_optimizers.py"]
    argv = [str(python), "-m", "pytest", *suites, "--universal-backend", "triton", "-q"]
    argv += ["-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
    environment = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    shown = subprocess.run(argv, capture_output=True, text=True, env=environment, cwd=ROOT)
    assert shown.returncode == 0, shown.stdout[-3000:]
    assert " passed" in shown.stdout and "failed" not in shown.stdout


@pytest.mark.other_torch
def test_the_universal_smoke_reference_replicates_under_another_torch(tmp_path):
    """reference/smoke, made under the lock's torch, spot-checked under torch
    2.11: its deterministic/0 retrained there gives the shipped chain and process records
    (`verify --reference --rerun`), as a reader on another stack would check it."""
    python = VENV / "bin" / "python"
    assert python.exists(), f"no venv at {VENV}: run tools/other_torch/build.sh {VENV}"
    argv = [str(python), "-m", "reprodqn.cli", "verify", "--reference"]
    argv += [str(ROOT / "reference" / "smoke"), "--rerun", "deterministic/0"]
    argv += ["--until", "3000", "--scratch", str(tmp_path / "rerun")]
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": "0"}
    shown = subprocess.run(argv, capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "identical" in shown.stdout + shown.stderr
