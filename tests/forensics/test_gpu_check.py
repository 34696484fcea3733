"""`reprodqn gpu-check`: one line and exit 3 without a GPU; rehearsed on the CPU, the same
checks as on a GPU (the gpu group then emulates its kernels)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.helpers import PARAMS, ROOT, cli_env


def gpu_check(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", "gpu-check", "--params", str(PARAMS), *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=cwd,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_non_zero(tmp_path):
    result = gpu_check("--out", str(tmp_path / "out"), cwd=ROOT)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device visible to torch" in lines[0]
    assert not (tmp_path / "out").exists()


def test_rehearsed_on_the_cpu_it_runs_every_check(tmp_path):
    out = tmp_path / "out"
    result = gpu_check(
        "--device",
        "cpu",
        "--steps",
        "900",
        "--sharing",
        "1",
        "2",
        "--set",
        "agent.network=nips",
        "--set",
        "agent.batch_size=8",
        "--out",
        str(out),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads((out / "gpu-check.json").read_text())
    assert found["replicable"] and found["deterministic"] == {"weights": None, "losses": None}
    # updates start at step 300: the gpu group's chains part at the first checkpoint after
    assert found["gpu_group"] == {"weights": 600, "losses": 600}
    # op by op they part in update 1, the first: the emulation's row order is drawn anew
    parting = found["gpu_group_ops"]["first"]
    assert parting["update"] == 1 and parting["what"] == "op output"
    assert parting["op"] == "aten.lift_fresh.default"  # the minibatch, rows in the drawn order
    assert set(found["throughput_steps_per_second"]) == {"1", "2"}
    assert found["sharing_parted"] == {}  # three more runs of the pair's seeds: its chain
    assert "nondeterminism by design: none" in found["audit"]
    report = (out / "gpu-check.md").read_text()
    assert "**one hash chain**" in report and "they part: weights at checkpoint step 600" in report
    assert "Op by op, over their first 20 updates: first difference: update 1 (" in report
    assert (
        "outside any module, a minibatch array entering torch (its rows or their order)" in report
    )
    assert "sharing the device, 1, 2 at a time: **the same chain**" in report


def gpu_result(rates: dict, sharing_parted: dict) -> dict:
    never = {"weights": None, "losses": None}
    return {
        "device": "cuda",
        "gpu": {"present": True, "devices": [{"name": "GPU", "capability": "9.0"}]},
        "torch": "2.13.0",
        "steps": 3000,
        "settings": [],
        "deterministic": never,
        "gpu_group": {"weights": 1000, "losses": 1000},
        "gpu_group_ops": {"updates": 20, "first": None},
        "audit": "audit",
        "throughput_steps_per_second": rates,
        "sharing_parted": sharing_parted,
    }


def test_on_a_gpu_it_recommends_the_sharing_that_pays_only_when_sharing_keeps_the_chain():
    from reprodqn.forensics.gpu_check import report

    best_inside = report(gpu_result({1: 190.0, 2: 350.0, 4: 340.0}, {}))
    assert "with 2 runs sharing the GPU: for a study, `REPRODQN_WORKERS` = 2 x" in best_inside
    assert "tries more" not in best_inside
    best_last = report(gpu_result({1: 190.0, 2: 350.0, 4: 600.0}, {}))
    assert "with 4 runs sharing" in best_last and "`--sharing 4 8` tries more" in best_last
    parted = {"4 sharing, run 3": {"weights": 1000, "losses": 1000}}
    unsafe = report(gpu_result({1: 190.0, 2: 350.0, 4: 600.0}, parted))
    assert "REPRODQN_WORKERS" not in unsafe
    assert "**they part**: 4 sharing, run 3 part: weights at checkpoint step 1000" in unsafe
