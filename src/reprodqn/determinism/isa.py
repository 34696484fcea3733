"""The CPU instruction-set floor: which SIMD kernels the math libraries may use.

oneDNN, ATen and MKL each pick the widest instruction set the CPU offers, and their
results differ between instruction sets, so the same run gives different weights on an
AVX-512 machine than on an AVX2 one. Pinning all three to a floor makes CPU results
replicate on any machine at or above it. MKL also looks at the vendor: its AVX2 and AVX512
reproducibility branches are honoured on Intel CPUs only (AMD gets its AUTO branch, and
other bits), so the network computes nothing in MKL (dqn.network routes every layer to
oneDNN, whose kernels look at the instruction set alone). The default floor, `portable`,
pins oneDNN and ATen to AVX2 and leaves MKL, for anything else that calls it, on its
COMPATIBLE branch, the one it runs alike on every vendor. `avx2` differs from it in that
branch only, so it gives the network the same numbers.
The libraries read these settings when they first run a kernel (measured: setting them
after `import torch` but before any op still works; after a convolution, nothing
changes), so they are applied before torch is even imported, and refused after: this
module must not import torch.

It is also the one owner of the numerics environment: the variables that change numbers,
which every job states explicitly and conditions.json records.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from reprodqn.core.errors import InputError

KNOBS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_CBWR")
CUBLAS_WORKSPACE = ":4096:8"  # PyTorch's reproducibility notes: deterministic cuBLAS
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# what conditions.json records, and the part of it the conditions fingerprint covers
NUMERICS_ENV = ("CUBLAS_WORKSPACE_CONFIG", *KNOBS, *THREAD_ENV, "PYTHONHASHSEED")
FINGERPRINT_ENV = ("CUBLAS_WORKSPACE_CONFIG", *KNOBS)
FLOORS = {
    # Intel and AMD alike (docs/replication.md: shown op by op under valgrind)
    "portable": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
    },
    # MKL's AVX2/AVX512 branches on Intel, its AUTO branch elsewhere (the network uses none)
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "avx512": {
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_CBWR": "AVX512",
    },
    "native": {},  # whatever this machine has (recorded as such)
}
REQUIRED_FLAGS = {
    "portable": ("avx", "avx2", "fma"),
    "avx2": ("avx", "avx2", "fma"),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"),
    "native": (),
}


def cpuinfo() -> dict[str, str]:
    """/proc/cpuinfo's fields for the first processor (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def machine_flags() -> set[str]:
    fields = cpuinfo()
    return set(fields.get("flags", fields.get("Features", "")).split())


STARTED_WITH = {knob: os.environ.get(knob) for knob in KNOBS}  # before this process set any


def environment_as_started() -> dict[str, str]:
    """This process's environment with the floor's knobs as the user's shell gave them,
    for a script it runs that applies its own floor ("native" sets none)."""
    environment = dict(os.environ)
    for knob, value in STARTED_WITH.items():
        if value is None:
            environment.pop(knob, None)
        else:
            environment[knob] = value
    return environment


def apply(floor: str, numerics: str = "standard") -> dict[str, str | None]:
    """Set the floor's knobs and cuBLAS's deterministic workspace in this process's
    environment (inherited by every worker), after checking the CPU reaches the floor and
    torch has not yet read the knobs. In the universal numerics an x86-64 floor on another
    CPU is this machine's own: the floor pins torch's kernels, which compute no bit of a
    universal run, so a universal study's params run on an ARM machine as they are."""
    import platform

    x86 = platform.machine() in ("x86_64", "AMD64")
    if floor != "native" and not x86 and numerics == "universal":
        floor = "native"
    if floor != "native" and not x86:
        raise InputError(
            f"compute.cpu_isa: {floor} is an x86-64 floor; this machine is "
            f"{platform.machine()} (use native)"
        )
    flags = machine_flags()
    missing = [f for f in REQUIRED_FLAGS[floor] if f not in flags]
    if flags and missing:
        raise InputError(
            f"compute.cpu_isa: {floor} needs a CPU with "
            f"{', '.join(REQUIRED_FLAGS[floor])}; this one lacks "
            f"{', '.join(missing)} (set compute.cpu_isa to a lower floor or "
            "native, which gives different numbers)"
        )
    wanted = FLOORS[floor]
    if "torch" in sys.modules:  # the libraries have read their settings already
        stale = [k for k, v in wanted.items() if os.environ.get(k) != v]
        if stale:
            raise InputError(
                f"compute.cpu_isa: {floor} must be applied before torch is "
                f"imported ({', '.join(stale)} would silently do nothing)"
            )
    os.environ.update(wanted)
    # stated in every process, as the launcher states it in every study job's environment,
    # so the conditions stage fingerprints the same conditions its runs compute under
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    return {knob: os.environ.get(knob) for knob in KNOBS}
