"""NVIDIA's Multi-Process Service (MPS) as a launch setting for runs sharing one GPU. A
daemon of this process's own (user-level pipe and log directories, no root) is started
before the runs and always stopped after them, so that their kernels run at once instead
of taking turns: the same kernels with the same launch settings, so the same bits, as long
as no SM limit is set. cuBLAS promises the same bits only on the same SM count, so
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is never set, and refused where the environment has it.
A client that cannot reach the daemon runs without it and says nothing, so the daemon's
control.log is read for each one. Where the binary or a CUDA device is missing it says so
in one line and the runs share the GPU as before."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reprodqn.core.errors import InputError

CONTROL = "nvidia-cuda-mps-control"
SM_LIMIT = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CLIENT = re.compile(r"NEW CLIENT (\d+)")  # the control daemon's line for each client


@dataclass
class Daemon:
    """A running control daemon: its binary and the directory holding its pipe and log."""

    binary: str
    root: Path

    @property
    def env(self) -> dict[str, str]:
        """What each client (and the daemon) needs to find the daemon."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.root / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(self.root / "log"),
        }

    @property
    def control_log(self) -> Path:
        return self.root / "log" / "control.log"

    def unattached(self, pids: list[int]) -> list[int]:
        """The processes among `pids` that control.log never saw connect."""
        text = self.control_log.read_text(errors="replace") if self.control_log.exists() else ""
        seen = {int(pid) for pid in CLIENT.findall(text)}
        return [pid for pid in pids if pid not in seen]


def refuse_sm_limit(environ: dict[str, str] | None = None) -> None:
    """An SM limit changes the SM count cuBLAS sees, and with it the bits: refused."""
    if SM_LIMIT in (os.environ if environ is None else environ):
        raise InputError(
            f"--mps: {SM_LIMIT} is set; an SM limit changes the SM count cuBLAS sees and "
            "so the bits (it promises the same bits only on the same SM count): unset it"
        )


def refuse(device: str) -> None:
    """What --mps cannot run with at all: a CPU device, or an SM limit."""
    if device != "cuda":
        raise InputError(
            f"--mps: MPS shares a CUDA device between processes; --device {device} has none"
        )
    refuse_sm_limit()


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


@contextmanager
def daemon(
    device: str,
    keep_log: Path | None = None,
    say: Callable[[str], None] = _say,
    has_device: Callable[[], bool] = _cuda_visible,
) -> Iterator[Daemon | None]:
    """An MPS daemon for the body's runs, or None (said in one line) where there can be
    none; stopped however the body ends, its control.log kept at `keep_log` if given."""
    refuse(device)
    binary = shutil.which(CONTROL)
    if binary is None:
        say(f"mps: {CONTROL} not found on PATH; the runs share the GPU without MPS, in turns")
        yield None
        return
    if not has_device():
        say("mps: no CUDA device visible; the runs share the GPU without MPS, in turns")
        yield None
        return
    running = Daemon(binary, Path(tempfile.mkdtemp(prefix="reprodqn-mps-")))
    env = {**os.environ, **running.env}
    for folder in running.env.values():
        Path(folder).mkdir()
    started = subprocess.run([binary, "-d"], env=env, capture_output=True, text=True)
    if started.returncode:
        reason = (started.stderr or started.stdout).strip().splitlines()[:1]
        say(
            f"mps: the daemon did not start (exit {started.returncode}: {' '.join(reason)}); "
            "the runs share the GPU without MPS, in turns"
        )
        shutil.rmtree(running.root, ignore_errors=True)
        yield None
        return
    try:
        yield running
    finally:
        stopped = subprocess.run(
            [binary], input="quit\n", env=env, capture_output=True, text=True, timeout=120
        )
        if stopped.returncode:
            say(f"mps: quitting the daemon gave exit {stopped.returncode}: {stopped.stdout}")
        if keep_log is not None and running.control_log.exists():
            shutil.copyfile(running.control_log, keep_log)
        shutil.rmtree(running.root, ignore_errors=True)
