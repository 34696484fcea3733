"""How many jobs or evaluation workers run at once: REPRODQN_WORKERS, else one per visible
GPU, else one per core the process may use divided by the threads each takes. A launch
setting: it never changes a result."""

from __future__ import annotations

import os
import subprocess

from reprodqn.core.errors import InputError


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
