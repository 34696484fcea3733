"""A study stage (train or evaluate): one `reprodqn` job per group x run, without the runs
already finished, handed to the local pool or to Slurm, and waited for."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.core.progress import StudyProgress
from reprodqn.core.workers import Footprint, default_workers
from reprodqn.dqn.replay import replay_bytes
from reprodqn.study import mlflow_store, slurm, tracking
from reprodqn.study.launch import Executor, Job, LocalExecutor, check, job_environment


def study_jobs(
    params, stage: str, params_argv: list[str], runs: Path, evaluations: Path
) -> list[Job]:
    """The stage's jobs, without the runs already finished with these params and
    conditions (the job itself re-checks the conditions fingerprint)."""
    from reprodqn.config.params import resolve_run
    from reprodqn.training.run_game import check_run_game
    from reprodqn.training.run_numerics import keep_recorded_numerics, named_on_command_line

    fingerprint = workspace.current_fingerprint()
    jobs = []
    for group, run in params.study.run_ids():
        config = resolve_run(params, group, run)
        argv = [
            stage,
            "--group",
            group,
            "--run",
            str(run),
            *params_argv,
            "--runs-dir",
            str(runs.resolve()),
        ]
        if stage == "train":  # a run keeps its recorded numerics, as its job does
            run_dir = workspace.run_dir(runs, group, run)
            named = named_on_command_line(params_argv)
            config, _ = keep_recorded_numerics(config, run_dir, named)
            if workspace.is_finished(run_dir, config.digest(), fingerprint):
                continue
            argv += ["--restart", "--track"]
        else:  # a run of another game is refused here, before any job starts
            check_run_game(workspace.run_dir(runs, group, run), config.env.game)
            argv += ["--evaluations-dir", str(evaluations.resolve()), "--workers", "1", "--track"]
        jobs.append(Job(f"{group}/{run}", argv, job_environment(params.compute.threads)))
    return jobs


def run_study(
    params,
    stage: str,
    params_argv: list[str],
    runs: Path,
    evaluations: Path,
    make_executor: Callable[[], Executor],
) -> None:
    """Run every unfinished job of the stage and wait; one line names any that failed."""
    label = f"study {stage}"
    jobs = study_jobs(params, stage, params_argv, runs, evaluations)
    total = len(params.study.run_ids())
    if len(jobs) < total:
        print(
            f"{label}: {total - len(jobs)} of {total} runs already finished with these "
            "params and conditions",
            file=sys.stderr,
        )
    if not jobs:
        return
    executor = make_executor()
    if stage == "train" and isinstance(executor, LocalExecutor) and not executor.gpus:
        warning = cpu_cost_warning(params, len(jobs), executor.workers, measured_speed(runs))
        if warning:
            print(f"{label}: {warning}", file=sys.stderr, flush=True)
    parent = None
    if mlflow_store.enabled():  # the store's schema and the study run, once, before any job
        parent = tracking.study_run(params, workspace.current_fingerprint())
        for job in jobs:  # every job reaches the same store and nests under the study run
            job.env["MLFLOW_TRACKING_URI"] = mlflow_store.tracking_uri()
            job.env["REPRODQN_MLFLOW_EXPERIMENT"] = mlflow_store.experiment_name()
            job.env[mlflow_store.PARENT_ENV] = parent
    monitor = None
    if stage == "train":  # per run and overall, from each run's progress.json
        records = {}
        for job in jobs:
            group, run = job.name.split("/")
            records[job.name] = workspace.run_dir(runs, group, int(run)) / workspace.PROGRESS_RECORD
        for path in records.values():  # a line left by an earlier attempt is stale
            path.unlink(missing_ok=True)
        workers = getattr(executor, "workers", None) or len(jobs)
        monitor = StudyProgress(label, records, workers).poll
    try:
        check(executor.run(jobs, label, monitor), label)
    finally:
        if parent is not None:
            tracking.finish_study_run(parent)


# agent steps/s of one run on one CPU core in the learning phase, until runs measure their
# own (docs/speed.md: 70-90 on the CPUs measured at the defaults)
CPU_STEPS_PER_SECOND = 70
CPU_WARNING_HOURS = 24


def cpu_cost_warning(params, runs: int, workers: int, measured: float | None) -> str | None:
    """What training this study costs on this machine's cores, when it is more than a day
    (the paper's scale on a CPU): so nobody starts months of training unawares."""
    speed = measured or CPU_STEPS_PER_SECOND
    hours = runs * params.train.steps / (speed * min(workers, runs)) / 3600
    if hours <= CPU_WARNING_HOURS:
        return None
    return (
        f"{runs} runs of {params.train.steps:,} agent steps on the CPU, {workers} at a "
        f"time, at about {speed:.0f} steps/s each: about {hours:,.0f} hours on this "
        "machine. `make laptop` runs the whole study at a scale where the agents learn, "
        "overnight on 2 cores; Ctrl-C stops this one, and rerunning resumes it."
    )


def training_footprint(configs: list) -> Footprint:
    """The most any of these runs holds in replay memory, on the GPU or on the host."""
    on_gpu = on_host = 0
    for config in configs:
        size = replay_bytes(config.replay.capacity, config.env.screen_size)
        if config.compute.replay_on_device:
            on_gpu = max(on_gpu, size)
        else:
            on_host = max(on_host, size)
    return Footprint(gpu_bytes=on_gpu, host_bytes=on_host)


def make_executor(
    name: str,
    workers: int | None,
    cores_per_job: int,
    launcher_config: Path | None,
    resume_every: int | None,
    runs: Path,
    entry: Callable[[list[str]], int],
    footprint: Footprint | None = None,
) -> Executor:
    """The local pool, or Slurm: a launch setting (flag, environment, launcher.yaml), never a
    param, so switching never reruns anything or changes a result."""
    if name == "local":
        return LocalExecutor(workers or default_workers(cores_per_job, footprint or Footprint()))
    if name != "slurm":
        raise InputError(f"--launcher {name}: expected local or slurm")
    config = launcher_config or (Path("launcher.yaml") if Path("launcher.yaml").exists() else None)
    executor = slurm.SlurmExecutor(
        slurm.load_launcher_settings(config), cores_per_job, Path.cwd(), entry
    )
    executor.check(resume_every, measured_speed(runs))
    return executor


def measured_speed(runs: Path) -> float | None:
    """Median training speed recorded by earlier runs (for Slurm's time-limit check)."""
    speeds = []
    for path in Path(runs).glob("*/*/process.jsonl"):
        for line in path.read_text().splitlines()[-5:]:
            try:
                speeds.append(float(json.loads(line)["steps_per_second"]))
            except (ValueError, KeyError, TypeError):
                continue
    return statistics.median(speeds) if speeds else None
