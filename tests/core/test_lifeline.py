"""No process of the package outlives the command that started it: `reprodqn evaluate
--workers 2` and `reprodqn study evaluate`, SIGKILLed or sent SIGTERM mid-checkpoint, leave
nothing alive 10 s later, and running them again gives the uninterrupted eval.csv."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from reprodqn.core import lifeline, workspace
from tests.helpers import PARAMS, TINY, cli_env, train_command

ROOT = Path(__file__).resolve().parents[2]
AUTHORS = ROOT / "start_sequences" / "authors.json"
# four checkpoints (TINY's): what is left after the first, three checkpoints of eight episodes
# that a blind network plays to the frame limit, outlasts the 10 s a worker has to exit
EVALUATION = ["evaluation.episodes=8", "evaluation.max_frames=3000"]
TWO_RUNS = [
    "study.runs_per_group=2",
    "study.left_out=[environment,exploration,gpu,initialization,minibatch]",
]


def _sleep_until_cut(reader) -> None:
    lifeline.watch(reader, lifeline.exit_now)
    time.sleep(60)


def test_cutting_the_line_ends_a_spawned_worker_at_once():
    line = lifeline.Lifeline()
    worker = multiprocessing.get_context("spawn").Process(
        target=_sleep_until_cut, args=(line.reader,)
    )
    worker.start()
    time.sleep(1)
    assert worker.is_alive()
    line.close()
    worker.join(timeout=10)
    assert worker.exitcode == lifeline.TERMINATED_EXIT


def test_a_lifeline_number_without_its_descriptor_is_ignored(monkeypatch):
    """A stale REPRODQN_LIFELINE_FD (no such descriptor) must not stop the command."""
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    monkeypatch.setenv(lifeline.FD_ENV, str(read))
    with lifeline.stop_on_sigterm():
        time.sleep(0.3)
    assert lifeline.FD_ENV not in os.environ  # and its children never see it


# -- whole commands, killed --------------------------------------------------------------------


def reprodqn(*args: str, overrides=()) -> list[str]:
    argv = [sys.executable, "-m", "reprodqn.cli", *args, "--params", str(PARAMS)]
    for item in [*TINY, *EVALUATION, *overrides]:
        argv += ["--set", item]
    return argv


def evaluate_command(runs: Path, evaluations: Path, run: int = 0) -> list[str]:
    return [
        *reprodqn("evaluate", "--group", "deterministic", "--run", str(run), overrides=TWO_RUNS),
        "--runs-dir",
        str(runs),
        "--evaluations-dir",
        str(evaluations),
        "--workers",
        "2",
        "--start-sequences",
        str(AUTHORS),
    ]


def study_evaluate_command(runs: Path, evaluations: Path) -> list[str]:
    # jobs evaluate with --workers 1; two jobs at once, so each holds a core
    return [
        *reprodqn(
            "study", "evaluate", overrides=[*TWO_RUNS, f"evaluation.start_sequences={AUTHORS}"]
        ),
        "--runs-dir",
        str(runs),
        "--evaluations-dir",
        str(evaluations),
        "--workers",
        "2",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """deterministic/0 and /1 at the tiny scale, and their uninterrupted evaluations."""
    root = tmp_path_factory.mktemp("lifeline")
    runs = root / "runs"
    for run in (0, 1):
        argv = train_command(runs, [*TINY, *EVALUATION, *TWO_RUNS])
        argv[argv.index("--run") + 1] = str(run)
        subprocess.run(argv, check=True, capture_output=True, env=cli_env())
    whole = root / "whole"
    for run in (0, 1):
        subprocess.run(
            evaluate_command(runs, whole, run),
            check=True,
            capture_output=True,
            env=cli_env(REPRODQN_TRACKING="0"),
        )
    return runs, {
        run: (workspace.eval_dir(whole, "deterministic", run) / workspace.EVAL_CSV).read_bytes()
        for run in (0, 1)
    }


def _journal_lines(evaluations: Path) -> int:
    return sum(
        len(path.read_text().splitlines()) for path in evaluations.glob("*/*/eval.progress.jsonl")
    )


def stop_mid_checkpoint(argv, evaluations: Path, sig: int, workers: int):
    """Start the command, wait until its first checkpoint is journalled and its workers are
    up, send `sig`; returns the ended process, its stderr and every process it had started.
    Its stderr goes to a file: a pipe would wait for every holder, orphans included."""
    log = evaluations.parent / "stderr.log"
    with open(log, "w") as stderr:
        command = subprocess.Popen(
            argv, env=cli_env(REPRODQN_TRACKING="0"), stdout=subprocess.DEVNULL, stderr=stderr
        )
    main = psutil.Process(command.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and command.poll() is None:
        descendants = main.children(recursive=True)
        if _journal_lines(evaluations) >= 1 and len(descendants) >= workers:
            break
        time.sleep(0.05)
    assert command.poll() is None, "it finished before it could be stopped"
    descendants = main.children(recursive=True)
    command.send_signal(sig)
    command.wait(timeout=120)
    assert descendants, "nothing started: nothing to check"
    return command, log.read_text(), descendants


def assert_none_alive(processes, seconds=10) -> None:
    _, alive = psutil.wait_procs(processes, timeout=seconds)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [" ".join(p.cmdline()[:6]) for p in alive]


def assert_stopped(command, stderr: str, started, sig: int, name: str) -> None:
    """Nothing it started is alive; a SIGTERM ended it with exit 143 and its one line."""
    assert_none_alive(started)
    if sig == signal.SIGTERM:
        assert command.returncode == lifeline.TERMINATED_EXIT
        assert stderr.strip().splitlines()[-1].startswith(f"reprodqn {name}: stopped by SIGTERM")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_evaluate_with_workers_stopped_mid_checkpoint_leaves_nothing_and_resumes(
    trained, tmp_path, sig
):
    runs, uninterrupted = trained
    evaluations = tmp_path / "evaluations"
    argv = evaluate_command(runs, evaluations)
    # the 2 pool workers and multiprocessing's resource tracker
    command, stderr, started = stop_mid_checkpoint(argv, evaluations, sig, workers=3)
    assert_stopped(command, stderr, started, sig, "evaluate")
    if sig == signal.SIGTERM:
        assert "Traceback" not in stderr
    out = workspace.eval_dir(evaluations, "deterministic", 0)
    assert not (out / workspace.EVAL_CSV).exists()
    subprocess.run(argv, check=True, capture_output=True, env=cli_env(REPRODQN_TRACKING="0"))
    assert (out / workspace.EVAL_CSV).read_bytes() == uninterrupted[0]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_study_evaluate_stopped_mid_checkpoint_leaves_no_job_and_resumes(trained, tmp_path, sig):
    runs, uninterrupted = trained
    evaluations = tmp_path / "evaluations"
    argv = study_evaluate_command(runs, evaluations)
    command, stderr, started = stop_mid_checkpoint(argv, evaluations, sig, workers=2)
    assert_stopped(command, stderr, started, sig, "study")
    subprocess.run(argv, check=True, capture_output=True, env=cli_env(REPRODQN_TRACKING="0"))
    for run in (0, 1):
        out = workspace.eval_dir(evaluations, "deterministic", run)
        assert (out / workspace.EVAL_CSV).read_bytes() == uninterrupted[run]
