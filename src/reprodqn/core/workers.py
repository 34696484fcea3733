"""How many jobs or evaluation workers run at once: REPRODQN_WORKERS, else K runs on each
visible GPU (REPRODQN_RUNS_PER_GPU, else as many as pay and its memory and the host's hold),
else one per core the process may use divided by the cores each takes; and how many
processes step a lockstep run's games (REPRODQN_ACTOR_WORKERS). Launch settings: they never
change a result."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from reprodqn.core.errors import InputError

ACTOR_WORKERS_ENV = "REPRODQN_ACTOR_WORKERS"
RUNS_PER_GPU_ENV = "REPRODQN_RUNS_PER_GPU"
# runs sharing one GPU that pay: on an H200 (docs/gpu-check), after annealing, 1, 4, 8 and 16
# runs made 992, 2,587, 2,839 and 2,717 agent steps/s in all on the fast path (404, 947,
# 1,306 and 1,543 on the standard one, where 16 runs' host memory rarely fits anyway)
PAYING_RUNS_PER_GPU = 8
# what a run holds besides its replay memory: CUDA context, networks, graphs' pools
# (GPU); interpreter, torch, the emulator, a resume point's staging (host)
GPU_BYTES_PER_RUN = 2 * 2**30
HOST_BYTES_PER_RUN = 3 * 2**30


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


@dataclass(frozen=True)
class Footprint:
    """What one job holds besides the interpreter: bytes on its GPU and in host memory
    (a training run's replay memory, wherever compute.replay_on_device puts it)."""

    gpu_bytes: int = 0
    host_bytes: int = 0


def default_workers(threads: int, footprint: Footprint = Footprint()) -> int:
    """REPRODQN_WORKERS, else K runs on each visible GPU (runs_per_gpu), else one job per
    `threads` cores."""
    value = os.environ.get("REPRODQN_WORKERS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"REPRODQN_WORKERS={value}: expected a positive integer")
        return int(value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    by_cores = max(1, (cores or 1) // threads)
    gpus = visible_gpus()
    if gpus:  # each run also steps its games on a core of its own
        return max(len(gpus), min(len(gpus) * runs_per_gpu(footprint, len(gpus)), by_cores))
    return by_cores


def runs_per_gpu(footprint: Footprint, gpus: int) -> int:
    """How many runs share each GPU: REPRODQN_RUNS_PER_GPU, else the most that pay
    (PAYING_RUNS_PER_GPU), no more than the GPU's memory and the host's hold."""
    value = os.environ.get(RUNS_PER_GPU_ENV, "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"{RUNS_PER_GPU_ENV}={value}: expected a positive integer")
        return int(value)
    return max(1, min(PAYING_RUNS_PER_GPU, memory_holds(footprint, gpus)))


def memory_holds(footprint: Footprint, gpus: int) -> int:
    """How many such runs each of `gpus` GPUs can take before its memory, or the host's
    shared among them, runs out."""
    k = host_memory_bytes() // (gpus * (footprint.host_bytes + HOST_BYTES_PER_RUN))
    gpu_memory = min(gpu_memory_bytes(), default=0)
    if gpu_memory:
        k = min(k, gpu_memory // (footprint.gpu_bytes + GPU_BYTES_PER_RUN))
    return k


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gpu_memory_bytes() -> list[int]:
    """Each visible GPU's memory, from nvidia-smi (without initialising CUDA here)."""
    out = _nvidia_smi("memory.total")
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    rows = [line.strip() for line in out]
    if listed is not None:
        wanted = {g.strip() for g in listed.split(",")}
        rows = [row for index, row in enumerate(rows) if str(index) in wanted]
    return [int(float(row)) * 2**20 for row in rows if row.replace(".", "").isdigit()]


def visible_gpus() -> list[str]:
    """GPU indices without initialising CUDA in this process (jobs must own their context)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    return _nvidia_smi("index")


def _nvidia_smi(field: str) -> list[str]:
    """One field per GPU from nvidia-smi; nothing where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]
