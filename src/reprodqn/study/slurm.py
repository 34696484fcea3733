"""Study jobs on a Slurm cluster, through submitit: the same `reprodqn` commands as the
local executor, as one job array, requeued on preemption and resumed exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import submitit
from pydantic import BaseModel, ConfigDict, Field

from reprodqn.core import lifeline
from reprodqn.core.errors import InputError
from reprodqn.core.progress import format_duration
from reprodqn.study.launch import Job, JobResult

# the scheduler's own variables a job keeps: the GPU it was given
SCHEDULER_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")


class LauncherSettings(BaseModel):
    """launcher.yaml (optional): how study jobs are submitted to Slurm. Not a DVC param:
    where a job runs never changes its result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = None
    account: str | None = None
    time_limit_minutes: int = Field(2880, ge=1)
    cpus_per_run: int | None = Field(None, ge=1)  # default: compute.threads, or K game workers
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
    up from its last resume point, so the result is bitwise that of an uninterrupted run.
    `entry` is the command line's main function, passed in (submitit pickles it by name)."""

    def __init__(self, entry: Callable[[list[str]], int]):
        self.entry = entry

    def __call__(self, argv: list[str], env: dict[str, str]) -> int:
        # Slurm's and submitit's own variables stay (the GPU it gave us, how to requeue)
        scheduler = {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("SLURM_", "SUBMITIT_")) or k in SCHEDULER_ENVIRONMENT
        }
        os.environ.clear()
        os.environ.update(env)
        os.environ.update(scheduler)
        code = self.entry(list(argv))
        if code == lifeline.TERMINATED_EXIT:
            # stopped by Slurm (a preemption's requeue, a cancel): no result, as a kill leaves
            # none; one written here was read as the job's failure before the requeued
            # attempt could write its own
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if code != 0:
            raise RuntimeError(f"reprodqn {' '.join(argv[:5])} ... exited with code {code}")
        return code


class SlurmExecutor:
    """Submits jobs as one Slurm job array through submitit and blocks until it finishes."""

    def __init__(
        self,
        settings: LauncherSettings,
        cores_per_job: int,
        workspace: Path,
        entry: Callable[[list[str]], int],
    ):
        self.settings = settings
        self.entry = entry
        self.cores_per_job = cores_per_job
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
            reason = (
                (credential.stderr.decode().strip().splitlines() or ["no output"])[-1]
                if credential is not None
                else reason
            )
            raise InputError(
                f"launcher slurm: munge could not create a credential ({reason}); "
                "is the munge key installed and munged running?"
            )
        partitions = subprocess.run(
            ["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        if s.partition is not None and s.partition not in partitions:
            raise InputError(
                f"launcher.yaml: partition {s.partition!r} is not a Slurm "
                f"partition here (have: {', '.join(sorted(partitions))})"
            )
        speed = s.steps_per_second or measured_steps_per_second
        if resume_every is not None and speed:
            minutes = resume_every / speed / 60
            if s.time_limit_minutes < minutes:
                raise InputError(
                    f"launcher.yaml: time_limit_minutes={s.time_limit_minutes} is below one "
                    f"resume interval (train.resume_every={resume_every} steps at "
                    f"{speed:.0f} steps/s = {minutes:.0f} min): a requeued job would never "
                    "get past its last resume point"
                )

    def _parameters(self, label: str) -> dict:
        """sbatch's settings for the stage's job array."""
        s = self.settings
        parameters = dict(
            time=s.time_limit_minutes,
            cpus_per_task=s.cpus_per_run or self.cores_per_job,
            array_parallelism=s.array_parallelism,
            signal_delay_s=s.signal_delay_seconds,
            job_name=label.replace(" ", "-"),
            ntasks_per_node=1,
            nodes=1,
        )
        if s.partition:
            parameters["partition"] = s.partition
        if s.account:
            parameters["account"] = s.account
        if s.gpus_per_run:
            parameters["gpus_per_node"] = s.gpus_per_run
        return parameters

    def run(
        self, jobs: Sequence[Job], label: str, monitor: Callable[[], None] | None = None
    ) -> list[JobResult]:
        import logging

        # without Slurm accounting (sacct), submitit warns on every status poll and falls
        # back to the jobs' result files, which is all this needs
        logging.getLogger("submitit").setLevel(logging.ERROR)
        s = self.settings
        executor = submitit.SlurmExecutor(folder=self.log_dir / "%j", max_num_timeout=3)
        executor.update_parameters(**self._parameters(label))
        with executor.batch():
            submitted = [executor.submit(StudyJob(self.entry), job.argv, job.env) for job in jobs]
        first = submitted[0].job_id.split("_")[0] if submitted else "-"
        print(
            f"{label}: {len(jobs)} jobs submitted to Slurm as array {first}"
            f"{' on partition ' + s.partition if s.partition else ''}; logs in "
            f"{self.log_dir}",
            file=sys.stderr,
            flush=True,
        )
        start = time.monotonic()
        pending = dict(zip(submitted, jobs, strict=True))
        results: list[JobResult] = []
        while pending:
            time.sleep(5)
            if monitor is not None:
                monitor()
            for handle, job in list(pending.items()):
                if not handle.done():
                    continue
                del pending[handle]
                try:
                    handle.result()
                    code = 0
                except Exception:  # the job failed: its log says why
                    code = 1
                results.append(
                    JobResult(job, code, time.monotonic() - start, Path(handle.paths.stderr))
                )
                done = len(results)
                rate = done / (time.monotonic() - start)
                eta = format_duration((len(jobs) - done) / rate) if rate else "?"
                state = "done" if code == 0 else "FAILED"
                print(
                    f"{label}: {job.name} {state} (Slurm job {handle.job_id}); "
                    f"{done}/{len(jobs)} jobs, {rate * 3600:.1f} jobs/h, ETA {eta}",
                    file=sys.stderr,
                    flush=True,
                )
        return results
