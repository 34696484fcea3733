"""The executor seam: a study stage is a list of jobs (one `reprodqn` command per group x
run, with an explicit environment), and an executor runs them and waits.

The local executor runs them as subprocesses in W slots: each job gets its own process
(a fresh CUDA context, so per-run determinism settings take effect), its slot's CPU core
or GPU, and an environment that states the numerics settings instead of inheriting them
by chance. Where a job runs never changes its result: the thread count is a param, and
the device is part of the conditions fingerprint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import submitit
from pydantic import BaseModel, ConfigDict, Field

from reprodqn import isa
from reprodqn.errors import InputError
from reprodqn.progress import format_duration

# passed to every job explicitly; anything else a job needs comes from its params
JOB_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONHASHSEED",
                   "CUBLAS_WORKSPACE_CONFIG", *isa.KNOBS, "MLFLOW_TRACKING_URI",
                   "REPRODQN_MLFLOW_EXPERIMENT", "REPRODQN_TRACKING", "REPRODQN_IMAGE",
                   "REPRODQN_IMAGE_DIGEST", "VIRTUAL_ENV", "DVC_ROOT")
SCHEDULER_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")


@dataclass
class Job:
    name: str                # "deterministic/0"
    argv: list[str]          # arguments after `reprodqn`
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class JobResult:
    job: Job
    returncode: int
    seconds: float
    log: Path | None = None


def job_environment(threads: int) -> dict[str, str]:
    """The environment every job starts from: numerics settings stated, not inherited."""
    env = {name: os.environ[name] for name in JOB_ENVIRONMENT if name in os.environ}
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", isa.CUBLAS_WORKSPACE)
    env.update(dict.fromkeys(isa.THREAD_ENV, str(threads)))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def default_workers(threads: int) -> int:
    value = os.environ.get("REPRODQN_WORKERS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"REPRODQN_WORKERS={value}: expected a positive integer")
        return int(value)
    gpus = visible_gpus()
    if gpus:
        return len(gpus)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // threads)


def visible_gpus() -> list[str]:
    """GPU indices without initialising CUDA in this process (jobs must own their context)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] \
        if out.returncode == 0 else []


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
            cores = self.cores[slot * share:(slot + 1) * share]
            argv = ["taskset", "-c", ",".join(map(str, cores)), *argv]
        return argv

    def run(self, jobs: Sequence[Job], label: str) -> list[JobResult]:
        pending = list(jobs)
        running: dict[int, tuple[subprocess.Popen, Job, float, Path | None]] = {}
        results: list[JobResult] = []
        start = time.monotonic()
        total = len(jobs)
        print(f"{label}: {total} jobs, {self.workers} workers"
              + (f" on GPUs {','.join(self.gpus)}" if self.gpus else " on the CPU"),
              file=sys.stderr, flush=True)
        while pending or running:
            for slot in range(self.workers):
                if slot not in running and pending:
                    job = pending.pop(0)
                    log = None
                    stdout = None
                    if self.log_dir is not None:
                        log = self.log_dir / (job.name.replace("/", "-") + ".log")
                        log.parent.mkdir(parents=True, exist_ok=True)
                        stdout = open(log, "w")  # noqa: SIM115 -- closed when the job ends
                    process = subprocess.Popen(self._argv(slot, job),
                                               env=self._slot_env(slot, job.env),
                                               stdout=stdout, stderr=subprocess.STDOUT
                                               if stdout else None)
                    if stdout:
                        stdout.close()
                    running[slot] = (process, job, time.monotonic(), log)
            time.sleep(0.2)
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
                print(f"{label}: {job.name} {state}; {done}/{total} jobs, "
                      f"{rate * 3600:.1f} jobs/h, ETA {eta}", file=sys.stderr, flush=True)
        return results


def check(results: list[JobResult], label: str) -> None:
    """One line naming every failed job (and its log), then a non-zero exit."""
    failed = [r for r in results if r.returncode != 0]
    if failed:
        names = ", ".join(f"{r.job.name}" + (f" (log {r.log})" if r.log else "")
                          for r in failed)
        raise InputError(f"{label}: {len(failed)} of {len(results)} jobs failed: {names}")


# ---------------------------------------------------------------------------------------------
# Slurm, through submitit: the same jobs as one job array


class LauncherSettings(BaseModel):
    """launcher.yaml (optional): how study jobs are submitted to Slurm. Not a DVC param:
    where a job runs never changes its result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = None
    account: str | None = None
    time_limit_minutes: int = Field(2880, ge=1)
    cpus_per_run: int | None = Field(None, ge=1)  # default: compute.threads
    gpus_per_run: int = Field(0, ge=0)
    array_parallelism: int = Field(64, ge=1)
    signal_delay_seconds: int = Field(120, ge=10)
    log_dir: str = "logs/slurm"
    steps_per_second: float | None = Field(None, gt=0)  # for the time-limit check
    munge_check: list[str] = ["munge", "-n"]


def load_launcher_settings(path: Path | None) -> LauncherSettings:
    import yaml
    from pydantic import ValidationError

    if path is None:
        return LauncherSettings()
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        return LauncherSettings.model_validate(raw)
    except FileNotFoundError:
        raise InputError(f"{path}: no such launcher settings file") from None
    except yaml.YAMLError:
        raise InputError(f"{path}: is not valid YAML") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"])
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise InputError(f"{path}: {field_name}: {message}") from None


class StudyJob(submitit.helpers.Checkpointable):
    """A study job on a Slurm node: the environment is set from what was submitted (never
    inherited by chance), then the same `reprodqn` command as the local executor runs. On
    preemption or timeout submitit requeues it with the same arguments; the command picks
    up from its last resume point, so the result is bitwise that of an uninterrupted run."""

    def __call__(self, argv: list[str], env: dict[str, str]) -> int:
        # Slurm's and submitit's own variables stay (the GPU it gave us, how to requeue)
        scheduler = {k: v for k, v in os.environ.items()
                     if k.startswith(("SLURM_", "SUBMITIT_")) or k in SCHEDULER_ENVIRONMENT}
        os.environ.clear()
        os.environ.update(env)
        os.environ.update(scheduler)
        from reprodqn.cli import main

        code = main(list(argv))
        if code != 0:
            raise RuntimeError(f"reprodqn {' '.join(argv[:5])} ... exited with code {code}")
        return code


class SlurmExecutor:
    """Submits jobs as one Slurm job array through submitit and blocks until it finishes."""

    def __init__(self, settings: LauncherSettings, threads: int, workspace: Path):
        self.settings = settings
        self.threads = threads
        self.log_dir = (workspace / settings.log_dir).resolve()

    def check(self, resume_every: int | None, measured_steps_per_second: float | None) -> None:
        """Settings that cannot work, as one line, before anything is submitted."""
        s = self.settings
        if shutil.which("sbatch") is None:
            raise InputError("launcher slurm: sbatch is not on PATH (is this a Slurm host?)")
        try:
            credential = subprocess.run(s.munge_check, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            credential = None
            reason = str(exc)
        if credential is None or credential.returncode != 0:
            reason = (credential.stderr.decode().strip().splitlines() or ["no output"])[-1] \
                if credential is not None else reason
            raise InputError(f"launcher slurm: munge could not create a credential ({reason}); "
                             "is the munge key installed and munged running?")
        partitions = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True,
                                    text=True, timeout=30).stdout.split()
        if s.partition is not None and s.partition not in partitions:
            raise InputError(f"launcher.yaml: partition {s.partition!r} is not a Slurm "
                             f"partition here (have: {', '.join(sorted(partitions))})")
        speed = s.steps_per_second or measured_steps_per_second
        if resume_every is not None and speed:
            minutes = resume_every / speed / 60
            if s.time_limit_minutes < minutes:
                raise InputError(
                    f"launcher.yaml: time_limit_minutes={s.time_limit_minutes} is below one "
                    f"resume interval (train.resume_every={resume_every} steps at "
                    f"{speed:.0f} steps/s = {minutes:.0f} min): a requeued job would never "
                    "get past its last resume point")

    def run(self, jobs: Sequence[Job], label: str) -> list[JobResult]:
        import logging

        # without Slurm accounting (sacct), submitit warns on every status poll and falls
        # back to the jobs' result files, which is all this needs
        logging.getLogger("submitit").setLevel(logging.ERROR)
        s = self.settings
        executor = submitit.SlurmExecutor(folder=self.log_dir / "%j",
                                          max_num_timeout=3)
        parameters = dict(time=s.time_limit_minutes, cpus_per_task=s.cpus_per_run or
                          self.threads, array_parallelism=s.array_parallelism,
                          signal_delay_s=s.signal_delay_seconds, job_name=label.replace(" ", "-"),
                          ntasks_per_node=1, nodes=1)
        if s.partition:
            parameters["partition"] = s.partition
        if s.account:
            parameters["account"] = s.account
        if s.gpus_per_run:
            parameters["gpus_per_node"] = s.gpus_per_run
        executor.update_parameters(**parameters)
        with executor.batch():
            submitted = [executor.submit(StudyJob(), job.argv, job.env) for job in jobs]
        first = submitted[0].job_id.split("_")[0] if submitted else "-"
        print(f"{label}: {len(jobs)} jobs submitted to Slurm as array {first}"
              f"{' on partition ' + s.partition if s.partition else ''}; logs in "
              f"{self.log_dir}", file=sys.stderr, flush=True)
        start = time.monotonic()
        pending = dict(zip(submitted, jobs, strict=True))
        results: list[JobResult] = []
        while pending:
            time.sleep(5)
            for handle, job in list(pending.items()):
                if not handle.done():
                    continue
                del pending[handle]
                try:
                    handle.result()
                    code = 0
                except Exception:  # the job failed: its log says why
                    code = 1
                results.append(JobResult(job, code, time.monotonic() - start,
                                         Path(handle.paths.stderr)))
                done = len(results)
                rate = done / (time.monotonic() - start)
                eta = format_duration((len(jobs) - done) / rate) if rate else "?"
                state = "done" if code == 0 else "FAILED"
                print(f"{label}: {job.name} {state} (Slurm job {handle.job_id}); "
                      f"{done}/{len(jobs)} jobs, {rate * 3600:.1f} jobs/h, ETA {eta}",
                      file=sys.stderr, flush=True)
        return results
