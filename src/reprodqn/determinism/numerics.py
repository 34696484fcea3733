"""Torch numerics settings for one run, applied before any CUDA work, and recorded.

CUDA (PyTorch's reproducibility notes): deterministic algorithms, cuDNN deterministic and
no benchmarking, CUBLAS_WORKSPACE_CONFIG set before cuBLAS starts, TF32 off (fp32
precision "ieee"; torch 2.13 defaults cuDNN convolutions to TF32). The gpu group turns
deterministic algorithms and cuDNN's off, as the paper's "nondeterministic GPU operations";
CUBLAS_WORKSPACE_CONFIG is in every process (isa.apply: a fingerprint field). CPU: the thread
count, which changes results, is fixed from params. Process memory: freed tensor memory
stays in the heap (`keep_freed_memory`), which changes speed only.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import torch

from reprodqn.determinism import isa


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            from reprodqn.core.errors import InputError

            raise InputError("compute.device: cuda requested but no CUDA device is available")
        return torch.device("cuda", 0)
    return torch.device("cpu")


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling on 64-bit: every per-update buffer is below it
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> dict:
    """Keep freed tensor memory in the heap for the next update to reuse.

    glibc serves blocks of 128 KB and more (a minibatch as float32, an activation, a
    gradient) with mmap and unmaps them at free(), raising that threshold as it goes, so
    how many buffers an update page-faults back in (zeroed) depends on the history of the
    process: measured from 26 to 2,700 minor faults per update at batch 32, against 15-34
    with these thresholds. Quiet, that is within the noise of an update's time; on a
    machine shared with other jobs it cost 12-18% of a training step. Numerics are
    untouched: torch aligns its buffers to 64 bytes either way. Written by hand (mallopt
    through ctypes): glibc has no other run-time switch, and GLIBC_TUNABLES must be set
    before Python starts."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return {"malloc": "platform default"}
    libc = ctypes.CDLL(None)
    applied = (
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
    if not applied:
        return {"malloc": "glibc defaults (mallopt refused)"}
    return {"malloc": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}


def use_deterministic_algorithms(mode: bool, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms(mode, warn_only), without importing torch._inductor
    where no compile has loaded it yet: torch's function imports it (and torch._dynamo with it) only
    to set inductor's `deterministic` flag, 0.8-2.5 s at every start. That flag's config
    reads TORCHINDUCTOR_DETERMINISTIC when a script first compiles, so it is set there."""
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1" if mode else "0"
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and hasattr(inductor, "deterministic"):  # not in torch 2.9's
        inductor.deterministic = mode  # type: ignore[attr-defined]
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def configure(
    device_request: str, threads: int, deterministic_gpu: bool
) -> tuple[torch.device, dict]:
    """Apply the settings; return the device and a record of what was applied."""
    if deterministic_gpu:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", isa.CUBLAS_WORKSPACE)
    device = resolve_device(device_request)

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)  # allowed once per process, before parallel work
    except RuntimeError:
        pass
    use_deterministic_algorithms(deterministic_gpu)
    # ...which also NaN-fills every new tensor before its first write, CPU ones included: a
    # guard against kernels that read memory they never wrote, which changes no result here
    # (golden chain). Off, as Megatron-LM (~15% on GPUs) and Ultralytics now run it; on this
    # CPU it costs 0.2% quiet, 3% shared (bench/update_options.py). torch 0.3 had no fill.
    # (the ignores: torch sets these module properties at run time; its stubs lack them)
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    torch.backends.cudnn.deterministic = deterministic_gpu
    torch.backends.cudnn.benchmark = False
    torch.backends.fp32_precision = "ieee"  # type: ignore[attr-defined]
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # type: ignore[attr-defined]
    torch.backends.cudnn.rnn.fp32_precision = "ieee"  # type: ignore[attr-defined]
    torch.backends.mkldnn.fp32_precision = "ieee"

    applied = {
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "fill_uninitialized_memory": torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "fp32_precision": {
            "cuda_matmul": torch.backends.cuda.matmul.fp32_precision,
            "cudnn_conv": torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
            "mkldnn": torch.backends.mkldnn.fp32_precision,
        },
        "environment": {name: os.environ.get(name) for name in isa.NUMERICS_ENV},
        "allocator": keep_freed_memory(),
    }
    if device.type == "cuda":
        applied["cuda_version"] = torch.version.cuda
        applied["cudnn_version"] = torch.backends.cudnn.version()
    return device, applied


def configure_universal(mode: str, threads: int, device=None) -> dict:
    """The universal mode's backend, set up and recorded ({} in the standard mode): the
    CPU's, and on a CUDA device the GPU's kernels (universal/cuda.py) checked there."""
    from reprodqn.universal import record as universal_record

    universal_record.set_up(mode)  # what a chain may be labelled
    if mode != "universal":
        return {}
    from reprodqn.universal import cpu

    record = cpu.configure(threads)
    if device is not None and torch.device(device).type == "cuda":
        from reprodqn.universal import cuda

        record["universal_backend"] = cuda.configure(torch.device(device))
    return record
