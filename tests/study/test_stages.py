"""Each stage's command, end to end at a tiny scale, in a scratch workspace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import PARAMS, TINY, cli_env

SMALL = [
    *TINY,
    "start_states.candidates=24",
    "start_states.top_k=8",
    "start_states.selected=4",
    "evaluation.episodes=4",
    "evaluation.max_frames=1200",
    "ranker.steps=400",
    "evaluation.start_sequences=start_sequences/selected.json",  # what select writes here
]


def reprodqn(workspace: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "reprodqn.cli", *args]
    if args[0] != "start-states":
        command += ["--params", str(PARAMS)]
        for item in SMALL:
            command += ["--set", item]
    result = subprocess.run(command, cwd=workspace, capture_output=True, text=True, env=cli_env())
    if check and result.returncode != 0:
        raise AssertionError(result.stderr)
    return result


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """candidates -> ranker -> select -> train -> evaluate, once for this module."""
    root = tmp_path_factory.mktemp("workspace")
    reprodqn(root, "candidates")
    reprodqn(root, "ranker")
    reprodqn(root, "select")
    reprodqn(root, "train", "--group", "deterministic", "--run", "0")
    evaluation = reprodqn(
        root, "evaluate", "--group", "deterministic", "--run", "0", "--workers", "2"
    )
    return root, evaluation


def test_start_sequence_stages_write_their_files(workspace):
    root, _ = workspace
    candidates = json.loads((root / "start_sequences" / "candidates.json").read_text())
    selected = json.loads((root / "start_sequences" / "selected.json").read_text())
    ranker = json.loads((root / "ranker" / "ranker.json").read_text())
    assert candidates["count"] == 24 and selected["count"] == 4
    assert selected["provenance"]["ranker_weights_sha256"] == ranker["weights_sha256"]
    from reprodqn.core.digests import sha256_file

    assert selected["provenance"]["candidates_sha256"] == sha256_file(
        root / "start_sequences" / "candidates.json"
    )
    ranking = (root / "start_sequences" / "ranking.csv").read_text().splitlines()
    assert len(ranking) == 25 and sorted(int(r.split(",")[3]) for r in ranking[1:]) == list(
        range(1, 25)
    )


def test_evaluate_writes_every_checkpoint_and_reports_progress(workspace):
    root, evaluation = workspace
    out_dir = root / "evaluations" / "deterministic" / "0"
    rows = (out_dir / "eval.csv").read_text().splitlines()
    assert rows[0] == "step,episode,start_sequence,sticky_seed,score,frames"
    assert len(rows) == 1 + 4 * 4  # 4 checkpoints x 4 episodes
    assert "agent steps/s" in evaluation.stderr and "4/4 checkpoints" in evaluation.stderr
    record = json.loads((out_dir / "eval.json").read_text())
    assert record["device"] == "cpu" and record["inference_threads"] == 1
    again = reprodqn(root, "evaluate", "--group", "deterministic", "--run", "0")
    assert "already evaluated" in again.stderr


def test_environment_group_is_evaluated_with_sticky_seeds(workspace):
    root, _ = workspace
    reprodqn(root, "train", "--group", "environment", "--run", "0")
    reprodqn(root, "evaluate", "--group", "environment", "--run", "0", "--workers", "1")
    rows = [
        line.split(",")
        for line in (root / "evaluations" / "environment" / "0" / "eval.csv")
        .read_text()
        .splitlines()[1:]
    ]
    assert {r[2] for r in rows} == {""}  # no start sequence
    assert [r[3] for r in rows[:4]] == ["0", "1", "2", "3"]  # episode k, sticky seed k


def test_evaluate_refuses_bad_inputs_and_overwrites_nothing(workspace, tmp_path):
    root, _ = workspace
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    run_dir = copy / "runs" / "deterministic" / "0"
    out_dir = copy / "evaluations" / "deterministic" / "0"
    before = (out_dir / "eval.csv").read_bytes()
    (out_dir / "eval.json").unlink()  # force a re-evaluation

    selected = copy / "start_sequences" / "selected.json"
    doc = json.loads(selected.read_text())
    doc["sequences"][0][0] = 3 if doc["sequences"][0][0] != 3 else 4
    selected.write_text(json.dumps(doc))
    result = reprodqn(copy, "evaluate", "--group", "deterministic", "--run", "0", check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "reprodqn: error: start_sequences/selected.json: "
        "sequences_sha256 does not match the sequences (edited "
        "or corrupted)"
    )
    shutil.copy(root / "start_sequences" / "selected.json", selected)

    checkpoint = run_dir / "checkpoints" / "step-000000400.safetensors"
    data = bytearray(checkpoint.read_bytes())
    data[-2] ^= 1
    checkpoint.write_bytes(bytes(data))
    result = reprodqn(
        copy, "evaluate", "--group", "deterministic", "--run", "0", "--workers", "2", check=False
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "step-000000400.safetensors: weights hash" in result.stderr
    assert (out_dir / "eval.csv").read_bytes() == before

    result = reprodqn(copy, "evaluate", "--group", "minibatch", "--run", "1", check=False)
    assert result.returncode == 2 and "training is not complete" in result.stderr
