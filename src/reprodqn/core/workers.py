"""How many jobs or evaluation workers run at once: REPRODQN_WORKERS, else one per visible
GPU, else one per core the process may use divided by the cores each takes; and how many
processes step a lockstep run's games (REPRODQN_ACTOR_WORKERS). Launch settings: they never
change a result."""

from __future__ import annotations

import os
import subprocess

from reprodqn.core.errors import InputError

ACTOR_WORKERS_ENV = "REPRODQN_ACTOR_WORKERS"


def actor_workers() -> int:
    """K from REPRODQN_ACTOR_WORKERS; 0 (unset): a lockstep run's games run in the
    trainer's own process."""
    value = os.environ.get(ACTOR_WORKERS_ENV, "")
    if not value:
        return 0
    if not value.isdigit():
        raise InputError(f"{ACTOR_WORKERS_ENV}={value}: expected a whole number of processes")
    return int(value)


def cores_per_training_job(threads: int, actors: int) -> int:
    """What one training job keeps busy: its threads, or its K game workers when a run has
    lockstep actors and K is larger (the trainer waits while the games step, the games
    while it learns, so the two never run at once)."""
    return max(threads, actor_workers()) if actors > 1 else threads


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
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [line.strip() for line in out.stdout.splitlines() if line.strip()]
        if out.returncode == 0
        else []
    )
