"""Launching the runs gpu-check and bench/gpu_throughput.py start, each a `reprodqn`
process, with the launch settings of runs sharing one GPU. None changes a kernel, so none
a chain: an MPS daemon (study/mps.py); blocking instead of spinning while a run waits
on the GPU (CU_CTX_SCHED_BLOCKING_SYNC, set in each process before torch makes its
context: torch has no switch for it); each run pinned to a core of its own. Each is
recorded with the rates it gave."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from reprodqn.core.errors import InputError
from reprodqn.study import mps

BLOCKING_SYNC = "REPRODQN_CUDA_BLOCKING_SYNC"  # read by the CLI before any command
CU_CTX_SCHED_BLOCKING_SYNC = 0x04  # cuda.h: block the thread on a sync primitive


def command(name: str, params: Path, overrides: list[str], runs_dir: Path) -> list[str]:
    """A `reprodqn NAME` process over these params and overrides, runs kept in runs_dir."""
    return [
        sys.executable,
        "-m",
        "reprodqn.cli",
        name,
        "--params",
        str(params),
        "--runs-dir",
        str(runs_dir),
        *(a for item in overrides for a in ("--set", item)),
    ]


def launch(
    runs: list[tuple],
    params: Path,
    overrides: list[str],
    runs_dir: Path,
    log: Path,
    env: dict[str, str] | None = None,
    cores: list[int] | None = None,
    pids: list[int] | None = None,
) -> float:
    """Train these runs at once, each in its own process; seconds until the last ends. A run
    is (group, run), or (group, run, folder) to train in a runs folder of its own. `env`:
    the processes' environment; `cores`: the i-th run pinned to cores[i % len(cores)] from
    before it starts; `pids` is given the processes' ids."""
    start = time.perf_counter()
    with open(log, "a") as out:
        procs = []
        for i, (group, run, *own) in enumerate(runs):
            argv = command("train", params, overrides, own[0] if own else runs_dir)
            argv += ["--group", group, "--run", str(run)]
            core = None if cores is None else {cores[i % len(cores)]}
            pin = None if core is None else (lambda core=core: os.sched_setaffinity(0, core))
            procs.append(subprocess.Popen(argv, stdout=out, stderr=out, env=env, preexec_fn=pin))
        if pids is not None:
            pids.extend(p.pid for p in procs)
        codes = [p.wait() for p in procs]
    if any(codes):
        raise InputError(f"gpu-check: a training run failed (exit {codes}); see {log}")
    return time.perf_counter() - start


@dataclass(frozen=True)
class Settings:
    """The launch settings asked for (--mps, --blocking-sync, --pin)."""

    mps: bool = False
    blocking_sync: bool = False
    pin: bool = False

    def refuse(self, device: str) -> None:
        """What cannot run at all, said before any run starts."""
        if self.mps:
            mps.refuse(device)


AS_BEFORE = Settings()  # no launch setting: the runs take turns on the GPU, as without them


@dataclass
class Launcher:
    """`launch` with the settings applied; what each call saw is kept for the record."""

    settings: Settings
    daemon: mps.Daemon | None = None
    unattached: list[str] = field(default_factory=list)

    def cores(self) -> list[int] | None:
        return sorted(os.sched_getaffinity(0)) if self.settings.pin else None

    def env(self) -> dict[str, str] | None:
        extra = dict(self.daemon.env) if self.daemon else {}
        if self.settings.blocking_sync:
            extra[BLOCKING_SYNC] = "1"
        return {**os.environ, **extra} if extra else None

    def __call__(
        self, runs: list[tuple], params: Path, overrides: list[str], runs_dir: Path, log: Path
    ) -> float:
        pids: list[int] = []
        try:
            return launch(runs, params, overrides, runs_dir, log, self.env(), self.cores(), pids)
        finally:  # runs that failed are named too: a missed daemon may be why
            if self.daemon is not None:
                self._name_unattached(self.daemon, pids, runs_dir)

    def _name_unattached(self, daemon: mps.Daemon, pids: list[int], runs_dir: Path) -> None:
        for pid in daemon.unattached(pids):
            line = (
                f"mps: run {pids.index(pid)} of {len(pids)} in {runs_dir} (pid {pid}) "
                "never attached to the MPS daemon: it ran without MPS"
            )
            print(line, file=sys.stderr)
            self.unattached.append(line)

    def record(self) -> dict:
        """The settings as they ran: MPS used or not, every client attached, the cores."""
        return {
            "mps": {
                "asked": self.settings.mps,
                "used": self.daemon is not None,
                "unattached": self.unattached,
            },
            "blocking_sync": self.settings.blocking_sync,
            "pinned_to": self.cores(),
        }


def describe(record: dict) -> str:
    """The launch settings of the runs sharing the device, as one line of a report."""
    used = record["mps"]
    if used["used"]:
        missed = len(used["unattached"])
        mps_part = (
            f"under MPS, {missed} runs never attached"
            if missed
            else "under MPS, every run attached"
        )
    elif used["asked"]:
        mps_part = "without MPS, asked for but not at hand (the log says why)"
    else:
        mps_part = "without MPS, in turns"
    waiting = "blocking" if record["blocking_sync"] else "the driver's default"
    pinned = "each pinned to a core of its own" if record["pinned_to"] else "unpinned"
    return f"The runs sharing the device: {mps_part}; waiting on it by {waiting}; {pinned}."


@contextmanager
def sharing(settings: Settings, device: str, keep_log: Path | None = None) -> Iterator[Launcher]:
    """A Launcher for runs sharing the device, under an MPS daemon while it lasts if asked."""
    settings.refuse(device)
    if not settings.mps:
        yield Launcher(settings)
        return
    with mps.daemon(device, keep_log) as running:
        yield Launcher(settings, running)


def apply_blocking_sync(load=ctypes.CDLL) -> str | None:
    """In a process that BLOCKING_SYNC asks it of, before torch makes a CUDA context: every
    device's primary context (the one torch uses) blocks its thread while it waits on the
    GPU, freeing the core. None, or why not, in one line."""
    try:
        driver = load("libcuda.so.1")
    except OSError:
        return "blocking sync: no CUDA driver (libcuda.so.1); waiting as the driver chooses"
    count = ctypes.c_int(0)
    if driver.cuInit(0) or driver.cuDeviceGetCount(ctypes.byref(count)):
        return "blocking sync: the CUDA driver did not start; waiting as the driver chooses"
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        code = driver.cuDeviceGet(ctypes.byref(device), ordinal) or (
            driver.cuDevicePrimaryCtxSetFlags(device, CU_CTX_SCHED_BLOCKING_SYNC)
        )
        if code:
            return f"blocking sync: device {ordinal} refused it (CUDA error {code})"
    return None
