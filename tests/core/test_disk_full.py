"""A disk that fills under a training run: one line saying what could not be written and
that the last good resume point is intact (hash-checked), exit 3 (the machine, not the
input), no half-written point left, and after space is freed the same command resumes to
the chain of a run never stopped. Runs in a tmpfs the test mounts (CI runs as root)."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

from reprodqn.determinism import resume
from tests.helpers import TINY, cli_env, train_command

OVERRIDES = [*TINY, "train.steps=1200", "train.checkpoint_every=600", "train.resume_every=300"]


def command(runs) -> list[str]:
    return train_command(runs, OVERRIDES)


@pytest.fixture
def small_disk(tmp_path):
    """A 26 MB tmpfs: room for the run's first resume point (~15 MB), not its second."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=26m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_one_line_keeps_the_last_point_and_resumes_exactly(tmp_path, small_disk):
    subprocess.run(
        command(tmp_path / "undisturbed"), check=True, capture_output=True, env=cli_env()
    )
    expected = (tmp_path / "undisturbed" / "deterministic" / "0" / "hashes.jsonl").read_bytes()

    full = subprocess.run(command(small_disk), capture_output=True, text=True, env=cli_env())
    assert full.returncode == 3, full.stderr
    assert "Traceback" not in full.stderr
    line = full.stderr.strip().splitlines()[-1]
    assert line.startswith("reprodqn: machine error: train deterministic/0: no space left")
    assert "the last good resume point (step 300) is intact" in line and "rerun" in line
    run_dir = small_disk / "deterministic" / "0"
    point = resume.load(run_dir / "resume", torch.device("cpu"))  # every file hash-checked
    assert point is not None and point.state["run"]["step"] == 300
    assert [p.name for p in (run_dir / "resume").iterdir() if p.name.startswith(".")] == []

    subprocess.run(["mount", "-o", "remount,size=80m", str(small_disk)], check=True)
    again = subprocess.run(command(small_disk), capture_output=True, text=True, env=cli_env())
    assert again.returncode == 0, again.stderr
    assert "resumed at step 300" in again.stderr
    assert (run_dir / "hashes.jsonl").read_bytes() == expected


def test_a_disk_too_small_for_one_resume_point_is_refused_before_training(tmp_path, small_disk):
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    refused = subprocess.run(command(small_disk), capture_output=True, text=True, env=cli_env())
    assert refused.returncode == 3 and "Traceback" not in refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert "a resume point needs about" in line and "free space and rerun" in line
    assert not (small_disk / "deterministic" / "0" / "hashes.jsonl").exists()
