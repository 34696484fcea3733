"""The executor seam: a study stage is a list of jobs (one `reprodqn` command per group x
run, with an explicit environment), and an executor runs them and waits.

The local executor runs them as subprocesses in W slots: each job gets its own process
(a fresh CUDA context, so per-run determinism settings take effect), its slot's CPU core
or GPU, and an environment that states the numerics settings instead of inheriting them
by chance. Where a job runs never changes its result: the thread count is a param, and
the device is part of the conditions fingerprint.

Jobs do not outlive their study. Each holds the study's lifeline (core.lifeline): when the
study dies, however it dies, every job is sent SIGTERM and stops as a kill would leave it,
resumable, rather than finish its run unwatched (hours at the laptop scale, holding a core
that the restarted study expects to have). A study stopped by SIGTERM or a failure stops
its jobs the same way before it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from reprodqn.core import lifeline, run_lock
from reprodqn.core.errors import InputError
from reprodqn.core.progress import format_duration
from reprodqn.core.workers import ACTOR_WORKERS_ENV, visible_gpus
from reprodqn.determinism import isa

# passed to every job explicitly; anything else a job needs comes from its params
JOB_ENVIRONMENT = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    *isa.KNOBS,
    "MLFLOW_TRACKING_URI",
    "REPRODQN_MLFLOW_EXPERIMENT",
    "REPRODQN_TRACKING",
    "REPRODQN_IMAGE",
    "REPRODQN_IMAGE_DIGEST",
    "VIRTUAL_ENV",
    "DVC_ROOT",
    "PYTHONPATH",
    ACTOR_WORKERS_ENV,
)
STOP_GRACE_SECONDS = 60  # a job sent SIGTERM stops its workers and exits; then it is killed


@dataclass
class Job:
    name: str  # "deterministic/0"
    argv: list[str]  # arguments after `reprodqn`
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class JobResult:
    job: Job
    returncode: int
    seconds: float
    log: Path | None = None


class Executor(Protocol):
    """Runs a stage's jobs to the end: the local pool or Slurm."""

    def run(
        self, jobs: Sequence[Job], label: str, monitor: Callable[[], None] | None = None
    ) -> list[JobResult]: ...


def launch_environment(threads: int) -> dict[str, str]:
    """The launch settings a run states however it is started (a study's job, or plain
    `train`, which adopts them): its thread counts, and a fixed hash seed unless one is
    given, so the two never differ among the conditions."""
    return {
        "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"),
        **dict.fromkeys(isa.THREAD_ENV, str(threads)),
    }


def adopt_launch_environment(threads: int, argv: list[str] | None) -> None:
    """This process takes a study job's launch settings: the thread counts at once (torch
    is not loaded yet), and a hash seed, which Python reads only when it starts, by
    starting `reprodqn ARGV` again in its place (argv None: a process that must not be
    replaced, a test's, keeps its own)."""
    stated = launch_environment(threads)
    seed = stated.pop("PYTHONHASHSEED")
    os.environ.update(stated)
    if argv is not None and os.environ.get("PYTHONHASHSEED") != seed:
        sys.stdout.flush()
        sys.stderr.flush()
        command = [sys.executable, "-m", "reprodqn.cli", *argv]
        os.execve(sys.executable, command, {**os.environ, "PYTHONHASHSEED": seed})


def job_environment(threads: int) -> dict[str, str]:
    """The environment every job starts from: numerics settings stated, not inherited."""
    env = {name: os.environ[name] for name in JOB_ENVIRONMENT if name in os.environ}
    env.update(launch_environment(threads))
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", isa.CUBLAS_WORKSPACE)
    env["PYTHONUNBUFFERED"] = "1"
    # a job meeting a run another process writes waits for it, then skips or resumes
    env.setdefault(
        run_lock.WAIT_ENV, os.environ.get(run_lock.WAIT_ENV, str(run_lock.EXECUTOR_WAIT))
    )
    return env


class LocalExecutor:
    """Runs jobs as subprocesses, `workers` at a time, each pinned to its slot's core/GPU."""

    def __init__(self, workers: int, log_dir: Path | None = None):
        self.workers = workers
        self.log_dir = log_dir
        self.gpus = visible_gpus()
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.cores = cores

    def _slot_env(self, slot: int, env: dict[str, str]) -> dict[str, str]:
        env = dict(env)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _argv(self, slot: int, job: Job) -> list[str]:
        argv = [sys.executable, "-m", "reprodqn.cli", *job.argv]
        if self.cores and self.workers <= len(self.cores):
            share = len(self.cores) // self.workers
            cores = self.cores[slot * share : (slot + 1) * share]
            argv = ["taskset", "-c", ",".join(map(str, cores)), *argv]
        return argv

    def run(
        self, jobs: Sequence[Job], label: str, monitor: Callable[[], None] | None = None
    ) -> list[JobResult]:
        running: dict[int, tuple[subprocess.Popen, Job, float, Path | None]] = {}
        line = lifeline.Lifeline()
        try:
            return self._run(jobs, label, monitor, running, line)
        finally:  # one SIGTERM per running job; the line closes after they have stopped
            _stop([process for process, *_ in running.values()])
            line.close()

    def _run(self, jobs, label, monitor, running, line) -> list[JobResult]:
        pending = list(jobs)
        results: list[JobResult] = []
        start = time.monotonic()
        total = len(jobs)
        print(
            f"{label}: {total} jobs, {self.workers} workers"
            + (f" on GPUs {','.join(self.gpus)}" if self.gpus else " on the CPU"),
            file=sys.stderr,
            flush=True,
        )
        while pending or running:
            for slot in range(self.workers):
                if slot not in running and pending:
                    job = pending.pop(0)
                    log = None
                    stdout = None
                    if self.log_dir is not None:
                        log = self.log_dir / (job.name.replace("/", "-") + ".log")
                        log.parent.mkdir(parents=True, exist_ok=True)
                        stdout = open(log, "w")  # closed when the job ends
                    env = self._slot_env(slot, job.env)
                    env[lifeline.FD_ENV] = str(line.reader.fileno())
                    process = subprocess.Popen(
                        self._argv(slot, job),
                        env=env,
                        pass_fds=(line.reader.fileno(),),
                        stdout=stdout,
                        stderr=subprocess.STDOUT if stdout else None,
                    )
                    if stdout:
                        stdout.close()
                    running[slot] = (process, job, time.monotonic(), log)
            time.sleep(0.2)
            if monitor is not None:  # progress lines of the running jobs, by time
                monitor()
            for slot, (process, job, began, log) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[slot]
                results.append(JobResult(job, process.returncode, time.monotonic() - began, log))
                done = len(results)
                elapsed = time.monotonic() - start
                rate = done / elapsed
                eta = format_duration((total - done) / rate) if rate else "?"
                state = "done" if process.returncode == 0 else f"FAILED ({process.returncode})"
                print(
                    f"{label}: {job.name} {state}; {done}/{total} jobs, "
                    f"{rate * 3600:.1f} jobs/h, ETA {eta}",
                    file=sys.stderr,
                    flush=True,
                )
        return results


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to each job still running, then wait; what has not exited by the grace is
    killed (its files stay as a kill leaves them: resumable)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def check(results: list[JobResult], label: str) -> None:
    """One line naming every failed job (and its log), then a non-zero exit."""
    failed = [r for r in results if r.returncode != 0]
    if failed:
        names = ", ".join(f"{r.job.name}" + (f" (log {r.log})" if r.log else "") for r in failed)
        raise InputError(f"{label}: {len(failed)} of {len(results)} jobs failed: {names}")
