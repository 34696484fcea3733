"""One run, one writer, shown with real processes: a second training of a run being trained
is refused at once and the first's chain stays an undisturbed run's; a SIGKILLed holder
leaves no stale lock; an executor's job (REPRODQN_LOCK_WAIT) waits for the holder, then
resumes the run to the same chain."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from reprodqn.core.run_lock import LOCK_NAME, WAIT_ENV
from tests.helpers import TINY, cli_env, train_command

OVERRIDES = [*TINY, "train.steps=2000", "train.resume_every=250"]


def command(runs) -> list[str]:
    return train_command(runs, OVERRIDES)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    runs = tmp_path_factory.mktemp("undisturbed")
    subprocess.run(command(runs), check=True, capture_output=True, env=cli_env())
    return (runs / "deterministic" / "0" / "hashes.jsonl").read_bytes()


def start_holder(runs, marker: str = LOCK_NAME) -> subprocess.Popen:
    """A training that provably holds the lock: its own pid is in the lock file."""
    process = subprocess.Popen(
        command(runs), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run_dir = runs / "deterministic" / "0"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if (
                json.loads((run_dir / LOCK_NAME).read_text())["pid"] == process.pid
                and (run_dir / marker).exists()
            ):
                return process
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    process.kill()
    pytest.fail("the first training never held its lock")


def test_a_second_training_of_a_running_run_is_refused(tmp_path, undisturbed):
    first = start_holder(tmp_path)
    second = subprocess.run(command(tmp_path), capture_output=True, text=True, env=cli_env())
    assert first.poll() is None, "the first training ended before the second was refused"
    assert second.returncode == 2 and "Traceback" not in second.stderr
    line = second.stderr.strip().splitlines()[-1]
    assert "train deterministic/0" in line and f"pid {first.pid}" in line
    assert first.wait(timeout=300) == 0
    assert (tmp_path / "deterministic" / "0" / "hashes.jsonl").read_bytes() == undisturbed


def test_an_executor_job_waits_for_the_holder_then_resumes_after_it_is_killed(
    tmp_path, undisturbed
):
    holder = start_holder(tmp_path, marker="resume")  # past its first resume point
    waiting = subprocess.Popen(
        command(tmp_path),
        env=cli_env(**{WAIT_ENV: "300"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = [waiting.stderr.readline() for _ in range(2)]  # after train's 'starting' line
    assert "waiting up to 300 s" in said[-1] and f"pid {holder.pid}" in said[-1], said
    holder.send_signal(signal.SIGKILL)  # a preempted job; the kernel drops its lock
    holder.wait()
    rest = waiting.communicate(timeout=300)[1]
    assert waiting.returncode == 0, rest
    assert "resumed at step" in rest  # from the killed holder's resume point
    assert (tmp_path / "deterministic" / "0" / "hashes.jsonl").read_bytes() == undisturbed
    lock = json.loads((tmp_path / "deterministic" / "0" / LOCK_NAME).read_text())
    assert lock["pid"] == waiting.pid  # the lock file names its last holder


def test_a_block_that_fails_having_written_nothing_leaves_no_lock_nor_the_folders_made(tmp_path):
    """A refused `evaluate` left evaluations/GROUP/RUN/.lock (issue 72, item 6)."""
    from reprodqn.core.errors import InputError
    from reprodqn.core.run_lock import hold

    def refused(directory):
        with pytest.raises(InputError, match="refused"), hold(directory, "test"):
            raise InputError("refused")

    base = tmp_path
    refused(base / "evaluations" / "deterministic" / "0")
    assert list(base.iterdir()) == []  # every folder it made, gone
    (base / "kept").mkdir()
    refused(base / "kept" / "0")
    assert list(base.iterdir()) == [base / "kept"]  # a folder it did not make stays
    with pytest.raises(InputError), hold(base / "wrote", "test"):
        (base / "wrote" / "eval.csv").write_text("")
        raise InputError("failed after writing")
    assert sorted(p.name for p in (base / "wrote").iterdir()) == [".lock", "eval.csv"]
