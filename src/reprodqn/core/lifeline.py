"""Worker processes die with the process that started them, however it dies; SIGTERM stops
a command the way a kill would, with one line.

A lifeline is a pipe whose write end only the starting process holds. Each child blocks a
daemon thread on the read end, which sees end-of-file the moment the write end closes: when
the parent exits, is killed by any signal (the kernel closes its descriptors, SIGKILL
included), or cuts the line on purpose. A pipe rather than prctl(PR_SET_PDEATHSIG), which
fires when the *thread* that started the child ends and exists only on Linux, or a watchdog
polling getppid(), which wakes every interval and misses a parent that has children of its
own adopted by a subreaper.

Two kinds of children: a worker that holds nothing of its own (an evaluation process) exits
at once; a command (a study's job) is sent SIGTERM, so it stops its own workers in turn and
leaves its files as a kill would.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection

# the environment variable through which a study's job finds its lifeline's descriptor
FD_ENV = "REPRODQN_LIFELINE_FD"
TERMINATED_EXIT = 128 + signal.SIGTERM  # what a shell reports for a command SIGTERM stopped


class Terminated(BaseException):
    """SIGTERM, raised in the main thread. A BaseException, as KeyboardInterrupt is, so no
    `except Exception` on the way up mistakes a stop for a failure to report and go on."""


class Lifeline:
    """The parent's side: `reader` goes to each child (a spawned process's argument, or a
    subprocess's passed descriptor); `cut()` makes every child see the end, as the parent's
    death would."""

    def __init__(self) -> None:
        # not inheritable: a child holds the reader only where it is given, never the writer
        self.reader, self._writer = multiprocessing.Pipe(duplex=False)

    def cut(self) -> None:
        self._writer.close()

    def close(self) -> None:
        self.cut()
        self.reader.close()


def watch(reader: Connection | int, on_cut: Callable[[], None]) -> None:
    """In a child: call `on_cut` (from a daemon thread) once the parent's end is closed.
    A Connection must stay referenced by the caller: its collection closes the descriptor."""
    fd = reader if isinstance(reader, int) else reader.fileno()

    def wait() -> None:
        while True:
            try:
                if not os.read(fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        on_cut()

    threading.Thread(target=wait, name="lifeline", daemon=True).start()


def exit_now() -> None:
    """For a worker with nothing to save: end this process at once."""
    os._exit(TERMINATED_EXIT)


def stop_this_command() -> None:
    """For a command: the same path as a SIGTERM from outside."""
    os.kill(os.getpid(), signal.SIGTERM)


def _raise_terminated(signum, frame) -> None:
    # a second SIGTERM (the lifeline's and the parent's) must not cut the clean-up short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Around a command in the main thread: SIGTERM raises Terminated, so `with` blocks and
    `finally` clauses stop the command's workers before it exits; and the lifeline its
    parent passed, if any, is watched, to stop the same way when the parent is gone."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread; a command run from another has no say
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    fd = os.environ.pop(FD_ENV, "")  # its own children never inherit a stale number
    if fd.isdigit() and _is_open(int(fd)):
        watch(int(fd), stop_this_command)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:  # a number set by hand, without the descriptor: nothing to watch
        return False
    return True
