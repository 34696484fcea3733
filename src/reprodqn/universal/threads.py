"""The CPU backend's thread count: the one asked for is the one applied. Threads split a
kernel's outputs, never a sum, so the count changes speed only; at one thread the kernels
are the ones compiled without numba's parallel layer (cpu.py), so no pool of threads waits,
spinning, on a core another process needs."""

from __future__ import annotations

_count: dict[str, int] = {}  # what `set_threads` was given; torch's until then


def threads() -> int:
    if "count" not in _count:
        import torch

        set_threads(torch.get_num_threads())  # an evaluation worker's, say
    return _count["count"]


def set_threads(count: int) -> None:
    import numba

    _count["count"] = max(1, min(count, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    if _count["count"] > 1:
        apply()


def apply() -> None:
    """numba's count set again (numba may start its pool while compiling)."""
    import numba

    numba.set_num_threads(_count["count"])
