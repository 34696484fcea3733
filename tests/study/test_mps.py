"""study/mps.py: the MPS daemon as a launch setting, against a fake
nvidia-cuda-mps-control on PATH that records each call (its arguments, its input, the pipe
and log directories it was given) and, started, writes a control.log as the daemon does."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from reprodqn.core.errors import InputError
from reprodqn.study import mps
from tests.helpers import ROOT, cli_env

FAKE = """#!/bin/sh
input=""
[ "$1" = "-d" ] || input=$(cat)
echo "args=$* input=$input pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY \
sm=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none}" >> "$CALLS"
if [ "$1" = "-d" ]; then
  [ -n "$FAIL_START" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
  echo "[2026-11-28 03:00:00.000 Control 4242] Starting control daemon" >> \
"$CUDA_MPS_LOG_DIRECTORY/control.log"
fi
"""


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    """The fake binary first on PATH; the file its calls go to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / mps.CONTROL
    binary.write_text(FAKE)
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.delenv(mps.SM_LIMIT, raising=False)
    return tmp_path / "calls"


def calls(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_it_starts_a_daemon_of_its_own_and_stops_it_keeping_its_log(fake_control, tmp_path):
    said: list[str] = []
    with mps.daemon("cuda", tmp_path / "kept.log", said.append, lambda: True) as running:
        assert running is not None
        pipe, log = running.env["CUDA_MPS_PIPE_DIRECTORY"], running.env["CUDA_MPS_LOG_DIRECTORY"]
        # user-level directories of its own, never the system's /tmp/nvidia-mps
        assert os.path.isdir(pipe) and os.path.isdir(log) and "nvidia-mps" not in pipe
        assert mps.SM_LIMIT not in running.env
        assert calls(fake_control) == [f"args=-d input= pipe={pipe} log={log} sm=none"]
    assert calls(fake_control)[1] == f"args= input=quit pipe={pipe} log={log} sm=none"
    assert not said and not running.root.exists()
    assert "Starting control daemon" in (tmp_path / "kept.log").read_text()


def test_it_stops_the_daemon_when_the_runs_fail(fake_control):
    with pytest.raises(RuntimeError, match="a run failed"):
        with mps.daemon("cuda", None, lambda line: None, lambda: True):
            raise RuntimeError("a run failed")
    assert [line.split()[0] for line in calls(fake_control)] == ["args=-d", "args="]
    assert "input=quit" in calls(fake_control)[1]


def test_a_daemon_that_does_not_start_is_said_and_not_stopped(fake_control, monkeypatch):
    monkeypatch.setenv("FAIL_START", "1")
    said: list[str] = []
    with mps.daemon("cuda", None, said.append, lambda: True) as running:
        assert running is None
    assert len(calls(fake_control)) == 1  # the start; no quit to a daemon that is not there
    assert said == [
        "mps: the daemon did not start (exit 1: An instance of this daemon is already "
        "running); the runs share the GPU without MPS, in turns"
    ]


def test_without_the_binary_or_a_device_it_says_so_in_one_line_and_runs_without(
    fake_control, monkeypatch, tmp_path
):
    said: list[str] = []
    with mps.daemon("cuda", None, said.append, lambda: False) as running:
        assert running is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with mps.daemon("cuda", None, said.append, lambda: True) as running:
        assert running is None
    assert said == [
        "mps: no CUDA device visible; the runs share the GPU without MPS, in turns",
        f"mps: {mps.CONTROL} not found on PATH; the runs share the GPU without MPS, in turns",
    ]
    assert not calls(fake_control)


def test_on_a_cpu_or_with_an_sm_limit_it_is_refused(fake_control, monkeypatch):
    with pytest.raises(InputError, match="--device cpu has none"):
        with mps.daemon("cpu", None, print, lambda: True):
            pass
    monkeypatch.setenv(mps.SM_LIMIT, "50")
    with pytest.raises(InputError, match="SM count cuBLAS sees"):
        with mps.daemon("cuda", None, print, lambda: True):
            pass
    assert not calls(fake_control)


def test_control_log_names_the_clients_that_never_attached(tmp_path):
    running = mps.Daemon("unused", tmp_path)
    (tmp_path / "log").mkdir()
    running.control_log.write_text(
        "[2026-11-28 03:00:01.000 Control 4242] NEW CLIENT 101 from user 0: "
        "Server is not ready, push client to pending list\n"
        "[2026-11-28 03:00:01.100 Control 4242] NEW CLIENT 103 from user 0: "
        "Server already exists\n"
    )
    assert running.unattached([101, 102, 103]) == [102]


def test_gpu_check_with_mps_on_a_cpu_is_refused_in_one_line_before_any_run(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", "gpu-check", "--device", "cpu", "--mps"]
        + ["--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "reprodqn: error: --mps: MPS shares a CUDA device between processes; --device cpu has none"
    ]
    assert not (tmp_path / "out").exists()
