"""`reprodqn gpu-check`: one line and exit 3 without a GPU; rehearsed on the CPU, the same
checks as on a GPU (the gpu group then emulates its kernels)."""

from __future__ import annotations

import json
import os
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
        "600",
        "--sharing",
        "2",
        "--set",
        "agent.network=nips",
        "--set",
        "agent.batch_size=8",
        "--out",
        str(out),
        "--pin",  # launch settings of the runs sharing the device: recorded, the chain kept
        "--blocking-sync",
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads((out / "gpu-check.json").read_text())
    assert found["replicable"] and found["deterministic"] == {"weights": None, "losses": None}
    # updates start at step 300: the gpu group's chains part at the first checkpoint after
    assert found["gpu_group"] == {"weights": 400, "losses": 400}
    # op by op they part in update 1, the first: the emulation's row order is drawn anew
    parting = found["gpu_group_ops"]["first"]
    assert parting["update"] == 1 and parting["what"] == "op output"
    assert parting["op"] == "aten.lift_fresh.default"  # the minibatch, rows in the drawn order
    # the fast path on a CPU is the device replay: one chain, the standard path's
    assert found["fast_path"] == {
        "settings": ["compute.replay_on_device=true"],
        "pair": {"weights": None, "losses": None},
        "against_standard": {"weights": None, "losses": None},
    }
    assert set(found["sharing"]) == {"standard", "fast"}
    for by_k in found["sharing"].values():
        assert set(by_k) == {"2"}
        # epsilon anneals by step 500 of 600: the last records are timed after annealing
        assert all(rate > 0 for rate in by_k["2"]["annealed_per_run"])
        assert by_k["2"]["annealed"] == pytest.approx(sum(by_k["2"]["annealed_per_run"]))
    assert found["sharing_parted"] == {}  # four more runs of the pair's seeds: its chain
    assert found["sharing_launch"] == {
        "mps": {"asked": False, "used": False, "unattached": []},
        "blocking_sync": True,
        "pinned_to": sorted(os.sched_getaffinity(0)),
    }
    # a run asked to block while it waits on a GPU, on a CPU: said in its log, nothing else
    assert "blocking sync: no CUDA driver" in (out / "train.log").read_text()
    assert "nondeterminism by design: none" in found["audit"]
    report = (out / "gpu-check.md").read_text()
    assert "**one hash chain**" in report and "they part: weights at checkpoint step 400" in report
    assert "Op by op, over their first 20 updates: first difference: update 1 (" in report
    assert (
        "outside any module, a minibatch array entering torch (its rows or their order)" in report
    )
    assert "sharing the device, 2 at a time, on both paths: **the same chain**" in report
    assert "two runs: **one hash chain**, **the standard path's** (on a CPU the fast" in report
    assert "| fast | 2 |" in report and "| standard | 2 |" in report
    assert "without MPS, in turns; waiting on it by blocking; each pinned to a core" in report
    # what came, check by check, with its seconds: the same results as the final record
    partial = json.loads((out / "gpu-check.partial.json").read_text())
    stages = ["deterministic", "gpu_group", "gpu_group_ops", "audit", "fast_path"]
    stages += ["sharing_launch", "sharing"]
    assert set(partial["seconds"]) == {*stages, "sharing_parted"}
    assert all(partial[key] == found[key] for key in stages)
    assert found["study_holds"]["capacity"] == 1_000_000  # params.yaml's, not the check's


def gpu_result(rates: dict, sharing_parted: dict, fast_parts: bool = False) -> dict:
    never = {"weights": None, "losses": None}
    parted = {"weights": 1000, "losses": 1000}
    by_path = {
        path: {
            k: {"whole_runs": rate * scale / 2, "annealed": rate * scale, "annealed_per_run": []}
            for k, rate in rates.items()
        }
        for path, scale in (("standard", 1), ("fast", 3))
    }
    return {
        "device": "cuda",
        "gpu": {"present": True, "devices": [{"name": "GPU", "capability": "9.0"}]},
        "torch": "2.13.0",
        "steps": 3000,
        "settings": [],
        "deterministic": never,
        "fast_path": {
            "settings": ["compute.replay_on_device=true", "compute.cuda_graphs=true"],
            "pair": never,
            "against_standard": parted if fast_parts else never,
            **({"device_replay_against_standard": never} if fast_parts else {}),
        },
        "gpu_group": parted,
        "gpu_group_ops": {"updates": 20, "first": None},
        "audit": "audit",
        "sharing": by_path,
        "sharing_parted": sharing_parted,
        "sharing_launch": {
            "mps": {"asked": False, "used": False, "unattached": []},
            "blocking_sync": False,
            "pinned_to": None,
        },
        "replicable": not sharing_parted and not fast_parts,
    }


def test_on_a_gpu_it_recommends_the_sharing_that_pays_only_when_every_chain_holds():
    from reprodqn.forensics.gpu_check import report

    best_inside = report(gpu_result({1: 190.0, 2: 350.0, 4: 340.0}, {}))
    assert "1050 in all, with 2 runs sharing the GPU on the fast path" in best_inside
    assert "`REPRODQN_RUNS_PER_GPU=2` with `--set compute.replay_on_device=true" in best_inside
    assert "tries more" not in best_inside
    best_last = report(gpu_result({1: 190.0, 2: 350.0, 4: 600.0}, {}))
    assert "with 4 runs sharing" in best_last and "`--sharing 4 8` tries more" in best_last
    parted = {"fast path, 4 sharing, run 3": {"weights": 1000, "losses": 1000}}
    unsafe = report(gpu_result({1: 190.0, 2: 350.0, 4: 600.0}, parted))
    assert "REPRODQN_RUNS_PER_GPU" not in unsafe
    assert (
        "**they part**: fast path, 4 sharing, run 3 part: weights at checkpoint step 1000" in unsafe
    )
    graphs_differ = report(gpu_result({1: 190.0}, {}, fast_parts=True))
    assert (
        "but against the standard path's they part: weights at checkpoint step 1000"
        in graphs_differ
    )
    assert "the device replay alone: the standard chain, so the graphs differ" in graphs_differ
    assert "REPRODQN_RUNS_PER_GPU" not in graphs_differ
    replay_fails = gpu_result({1: 190.0}, {}, fast_parts=True)
    del replay_fails["fast_path"]["device_replay_against_standard"]
    replay_fails["fast_path"]["device_replay_failed"] = "a training run failed (exit [1])\nlast"
    assert "; the device replay alone failed: a training run failed (exit [1])" in report(
        replay_fails
    )


def test_the_sharing_it_recommends_is_what_the_studys_replay_memory_leaves_room_for():
    """The sweep's runs hold a short replay; a study's hold a million transitions each."""
    from reprodqn.forensics.gpu_check import report

    result = gpu_result({1: 190.0, 4: 600.0, 16: 1500.0}, {})
    result["study_holds"] = {"capacity": 1_000_000, "standard": 13, "fast": 9}
    text = report(result)
    assert "with 16 runs sharing the GPU on the fast path" in text
    assert "`REPRODQN_RUNS_PER_GPU=9` with `--set" in text
    assert (
        "(9, not 16: this machine's memory holds 9 of the study's runs on the fast path, " in text
    )
    assert "tries more" not in text
    result["study_holds"]["fast"] = 20
    assert "`REPRODQN_RUNS_PER_GPU=16` with" in report(result)


def test_a_study_whose_runs_do_not_fit_gets_no_sharing_advice():
    from reprodqn.forensics.gpu_check import report

    result = gpu_result({1: 190.0, 4: 600.0}, {})
    result["study_holds"] = {"capacity": 1_000_000, "standard": 13, "fast": 0}
    text = report(result)
    assert "REPRODQN_RUNS_PER_GPU" not in text
    assert "each with a replay of 1,000,000 transitions, do not fit in this machine's" in text


def test_a_fast_path_that_fails_is_reported_and_the_standard_checks_stand(tmp_path):
    """On a GPU where capture fails, the report says so with the run's last words; the
    standard path's figures are still given, and nothing is recommended."""
    from reprodqn.forensics.gpu_check import report

    result = gpu_result({1: 190.0, 4: 600.0}, {})
    result["fast_path"] = {
        "settings": ["compute.replay_on_device=true", "compute.cuda_graphs=true"],
        "failed": "gpu-check: a training run failed (exit [1, 1])\nRuntimeError: capture failed",
    }
    result["sharing"]["fast"] = {"failed": "gpu-check: a training run failed (exit [1])"}
    result["replicable"] = False
    text = report(result)
    assert "**it failed**: gpu-check: a training run failed (exit [1, 1]) / RuntimeError" in text
    assert "| fast | failed: gpu-check: a training run failed (exit [1]) |" in text
    assert "| standard | 4 | 600.0 | 150.0 | 300.0 |" in text
    assert "REPRODQN_RUNS_PER_GPU" not in text
