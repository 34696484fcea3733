"""verify reads the checkpoint files, not only the chains: each checkpoint a run holds is
checked against the weights SHA-256 its chain records, in `verify --reference` (both
sides), `verify A B` and `verify --rerun`'s reference, and a mismatch is one line naming
the file (a flipped byte, or another run's checkpoint swapped in, once said "identical")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from reprodqn import exact
from reprodqn.config.study import GroupConfig, StudyConfig
from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.forensics import chains, checkpoint_files, verify
from tests.forensics.test_verify import make_workspace
from tests.helpers import cli_env

STUDY = StudyConfig(runs_per_group=2, groups={"deterministic": GroupConfig()})


def with_checkpoints(root) -> None:
    """Each run of a make_workspace study given real checkpoints, its chain their hashes."""
    for run in (0, 1):
        run_dir = workspace.run_dir(root / workspace.RUNS, "deterministic", run)
        lines = workspace.read_hashes(run_dir)
        workspace.checkpoints_dir(run_dir).mkdir()
        for line in lines:
            weights = {"w": torch.full((2,), float(run * 1000 + line["step"]))}
            path = workspace.checkpoint_path(run_dir, line["step"])
            line["weights_sha256"] = save_weights(path, weights, {})
        (run_dir / workspace.HASHES).write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def pair(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_workspace(ours, {("deterministic", 0): ("a", 1), ("deterministic", 1): ("a", 1)})
    with_checkpoints(ours)
    shutil.copytree(ours, theirs)
    return ours, theirs


def checkpoint(root, run, step):
    run_dir = workspace.run_dir(root / workspace.RUNS, "deterministic", run)
    return workspace.checkpoint_path(run_dir, step)


def flip_a_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_verify_reference_checks_every_checkpoint_file_on_both_sides(pair):
    ours, theirs = pair
    result = verify.verify(ours, theirs, STUDY)
    assert result["identical"] and result["checkpoint_files_checked"] == 8
    assert "and 8 checkpoint files against their chains" in verify.summary(result)
    flip_a_byte(checkpoint(theirs, 1, 100))
    with pytest.raises(
        InputError, match=r"step-000000100\.safetensors: weights hash .* \(corrupted\)"
    ):
        verify.verify(ours, theirs, STUDY)
    shutil.copyfile(checkpoint(ours, 0, 100), checkpoint(theirs, 1, 100))  # swapped in
    with pytest.raises(InputError) as error:
        verify.verify(ours, theirs, STUDY)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(f"{checkpoint(theirs, 1, 100)}: weights SHA-256 ")
    assert "but its chain's line for step 100 records" in str(error.value)


def test_a_checkpoint_with_no_chain_line_is_named(pair):
    ours, theirs = pair
    shutil.copyfile(checkpoint(ours, 0, 100), checkpoint(ours, 0, 50))
    with pytest.raises(InputError, match=r"step-000000050\.safetensors: no line of its run's"):
        verify.verify(ours, theirs, STUDY)


def test_verify_of_two_result_folders_checks_their_checkpoints(tmp_path):
    for side in ("a", "b"):
        chain = exact.HashChain(tmp_path / side / "seed-0")
        net = torch.nn.Linear(2, 2)
        torch.nn.init.zeros_(net.weight)
        torch.nn.init.zeros_(net.bias)
        chain.checkpoint(0, net)
        chain.extend([1.0])
        chain.checkpoint(10, net)
    assert chains.compare(tmp_path / "a", tmp_path / "b")["checkpoint_files_checked"] == 4
    flip_a_byte(tmp_path / "b" / "seed-0" / "checkpoints" / "step-000000010.safetensors")
    cli = [sys.executable, "-m", "reprodqn.cli", "verify", "a", "b"]
    done = subprocess.run(cli, cwd=tmp_path, env=cli_env(), capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "b/seed-0/checkpoints/step-000000010.safetensors: weights hash" in done.stderr


def test_a_run_without_checkpoints_checks_none(tmp_path):
    make_workspace(tmp_path, {("deterministic", 0): ("a", 1)})
    run_dir = workspace.run_dir(tmp_path / workspace.RUNS, "deterministic", 0)
    assert checkpoint_files.check_run(run_dir) == 0


def test_rerun_checks_the_reference_runs_checkpoints_before_training(pair, tiny_params, tmp_path):
    from reprodqn.config.params import resolve_run

    _, theirs = pair
    flip_a_byte(checkpoint(theirs, 0, 0))
    config = resolve_run(tiny_params(), "deterministic", 0)
    with pytest.raises(InputError, match=r"step-000000000\.safetensors: weights hash"):
        verify.spot_check(theirs, config, 200, tmp_path / "scratch")
    assert not (tmp_path / "scratch").exists()  # refused before training anything
