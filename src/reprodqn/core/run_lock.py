"""One run, one writer: an OS file lock on the directory a command writes.

Two trainings of one run interleave their records into one corrupted chain under a
`complete.json`; DVC's own lock covers only `dvc repro` in one workspace, not a job re-run
by hand beside a study, a Slurm requeue while the preempted job still writes, or two
workspaces sharing a runs directory. So every writer of a run holds `flock` on
`<dir>/.lock`, which the kernel releases when the process dies (a killed job leaves no
stale lock), and writes its pid, host and command into it for the one who is refused.

A command run by hand refuses at once; an executor's job (the local pool and Slurm set
REPRODQN_LOCK_WAIT, seconds) waits for the holder, saying so, then finds the run complete
(and skips it) or resumes it. On NFS `flock` goes through the server's locks; Lustre
mounted `localflock` locks per node only and `noflock` not at all: where the filesystem
refuses locks, the command refuses to run unlocked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from reprodqn.core.errors import InputError

LOCK_NAME = ".lock"
WAIT_ENV = "REPRODQN_LOCK_WAIT"  # a launch setting: seconds an executor's job waits
EXECUTOR_WAIT = 3600  # what the executors set unless the user did
UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def wait_from_env() -> float | None:
    """Seconds to wait for a holder (REPRODQN_LOCK_WAIT), None to refuse at once."""
    value = os.environ.get(WAIT_ENV)
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        raise InputError(f"{WAIT_ENV}={value}: expected a number of seconds") from None


def holder(path: Path) -> str:
    try:
        found = json.loads(path.read_text())
        return f"pid {found['pid']} on {found['host']} since {found['since']} ({found['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its details not yet written)"


def _try_lock(handle, path: Path) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in UNSUPPORTED:
            raise InputError(
                f"{path}: this filesystem does not support file locks "
                f"({os.strerror(error.errno)}); refusing to write the run "
                "unlocked (use a local or NFS directory)"
            ) from None
        raise


@contextlib.contextmanager
def hold(directory: Path, what: str, wait: float | None = None) -> Iterator[None]:
    """Hold the lock of `directory` (created if missing) for `what` (e.g. 'train
    deterministic/0'); refuse with one line naming the holder, or wait up to `wait` s. A
    block that fails having written nothing there leaves no trace: the lock and the
    folders made for it go (a refused `evaluate` left evaluations/GROUP/RUN/.lock)."""
    directory = Path(directory)
    made = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    with open(path, "a+") as handle:
        deadline = None if wait is None else time.monotonic() + wait
        said = False
        while not _try_lock(handle, path):
            if deadline is None or time.monotonic() > deadline:
                raise InputError(
                    f"{what}: {directory} is being written by {holder(path)}; "
                    + ("gave up waiting" if said else "wait for it to finish or stop it")
                )
            if not said:
                print(
                    f"{what}: waiting up to {wait:.0f} s for {holder(path)}, which holds "
                    f"{directory}",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            time.sleep(1.0)
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": what,
                }
            )
        )
        handle.flush()
        with _no_trace_left(directory, made):  # only once held: never another's lock
            yield


@contextlib.contextmanager
def _no_trace_left(directory: Path, made: list[Path]) -> Iterator[None]:
    """On failure, with the lock still held: where the lock is all `directory` holds, the
    lock and the folders `made` for it (deepest first, while empty) are removed."""
    try:
        yield
    except BaseException:
        if made and [p.name for p in directory.iterdir()] == [LOCK_NAME]:
            (directory / LOCK_NAME).unlink()
            for folder in made:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        raise
