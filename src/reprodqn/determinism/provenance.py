"""Experimental conditions: the machine and software a result came from, and a fingerprint
of the part of them that changes numbers.

conditions.json records everything a reader of the paper's supplement would want (CPU,
RAM, OS, GPU, driver, CUDA, cuDNN, library versions, numerics settings, container image,
git commit). The fingerprint hashes only what changes results — device model, driver,
CUDA/cuDNN, torch, numpy, ale-py, OpenCV, Python, CPU instruction sets, thread count,
numerics environment — so a new machine of the same kind, or a new version of an
unrelated package, keeps it; a different GPU or torch build changes it and retrains.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.digests import json_digest
from reprodqn.determinism import isa
from reprodqn.determinism.sbom import write_sbom
from reprodqn.universal.record import universal_record

# instruction-set flags that decide which kernels torch, oneDNN, MKL and OpenCV run
ISA_FLAGS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512cd",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)
NUMERIC_PACKAGES = ("torch", "numpy", "ale-py", "opencv-python-headless")
UNIVERSAL_PACKAGES = ("ale-py", "opencv-python-headless")  # the frames; the rest is the spec's
REPORTED_PACKAGES = (
    *NUMERIC_PACKAGES,
    "gymnasium",
    "safetensors",
    "pydantic",
    "mlflow",
    "dvc",
    "submitit",
    "nvidia-ml-py",
    "numba",  # the one-pass RMSprop step: IEEE operations only, so not in the fingerprint
)
IMAGE_ENV = ("REPRODQN_IMAGE", "REPRODQN_IMAGE_DIGEST", "REPRODQN_IMAGE_TORCH")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# which CPU exactly (/proc/cpuinfo's words): a reader's, never the fingerprint's, whose ISA
# flags say what changes numbers
CPU_IDENTITY = {
    "vendor": "vendor_id",
    "family": "cpu family",
    "model_number": "model",
    "stepping": "stepping",
}
# conditions records made before them lack these: absent on one side is no difference
RECORDED_SINCE = {f"cpu.{name}" for name in CPU_IDENTITY} | {"kernels"}  # exact's runs


def cpu_info() -> dict:
    fields = isa.cpuinfo()
    flags = isa.machine_flags()
    import torch

    return {
        "model": fields.get("model name") or platform.processor() or platform.machine(),
        **{name: fields.get(key) for name, key in CPU_IDENTITY.items()},
        "architecture": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "isa_flags": sorted(flags & set(ISA_FLAGS)),
        "all_flags": sorted(flags),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def os_info() -> dict:
    pretty = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                pretty = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "system": platform.system(),
        "kernel": platform.release(),
        "distribution": pretty,
        "libc": " ".join(platform.libc_ver()).strip() or None,
    }


def gpu_info() -> dict:
    """GPUs through torch (and NVML for the driver when nvidia-ml-py is installed)."""
    import torch

    if not torch.cuda.is_available():
        return {
            "present": False,
            "note": "no CUDA device visible to torch",
            "torch_cuda_build": torch.version.cuda,
        }
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_bytes": props.total_memory,
            }
        )
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        pynvml.nvmlShutdown()
    except Exception:  # NVML absent or unusable: the driver stays unrecorded, not fatal
        driver = None
    return {
        "present": True,
        "devices": devices,
        "driver": driver,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


# where the running package lives: a checkout's src/ for `pip install -e .`
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def git_info(root: Path) -> dict:
    """The commit of the checkout `root` is in; else of the checkout the running package is
    in (a workspace outside the work tree, `make laptop LAPTOP=~/...`, runs the checkout's
    editable install)."""

    def git(where: Path, *args):
        return subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
        )

    try:
        for where in (root, PACKAGE_DIR):
            head = git(where, "rev-parse", "HEAD")
            if head.returncode == 0:
                status = git(where, "status", "--porcelain", "--untracked-files=no").stdout
                date = git(where, "log", "-1", "--format=%cs").stdout.strip()
                return {
                    "commit": head.stdout.strip(),
                    "dirty": bool(status.strip()),
                    "date": date or None,
                }
        return {"commit": None, "note": "not a git checkout"}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "note": "git unavailable"}


def container_info() -> dict:
    """Whether this runs in a container, and whose: podman's marker file or docker's; the
    image's name and digest (make docker-run passes them) and its torch build (cuda or cpu,
    the image's REPRODQN_IMAGE_TORCH)."""
    engine = (
        "podman"
        if Path("/run/.containerenv").exists()
        else "docker"
        if Path("/.dockerenv").exists()
        else None
    )
    return {
        "inside_container": engine is not None,
        "engine": engine,
        "image": os.environ.get("REPRODQN_IMAGE"),
        "image_digest": os.environ.get("REPRODQN_IMAGE_DIGEST"),
        "torch_build": os.environ.get("REPRODQN_IMAGE_TORCH"),
    }


def row_order_drawn(reduction_order: str, device_type: str, numerics: str) -> bool:
    """Whether each update takes its minibatch's rows in an order drawn from OS entropy
    (compute.cpu_reduction_order random): on a CPU, and on any device in the universal
    numerics, whose kernels are deterministic on a GPU too; on CUDA in the standard numerics
    the kernels' own order stands."""
    return reduction_order == "random" and (device_type == "cpu" or numerics == "universal")


def collect(compute_config, root: Path = Path(".")) -> dict:
    """Everything about where and how this process computes."""
    from reprodqn.determinism.numerics import resolve_device

    device = resolve_device(compute_config.device)
    numerics = getattr(compute_config, "numerics", "standard")
    gpu = gpu_info()
    conditions = {
        "device": str(device),
        "device_name": (
            gpu["devices"][device.index or 0]["name"] if device.type == "cuda" else "cpu"
        ),
        "cpu": cpu_info(),
        "memory_bytes": memory_bytes(),
        "os": os_info(),
        "gpu": gpu,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "packages": {name: package_version(name) for name in REPORTED_PACKAGES},
        "numerics": {
            "cpu_isa": compute_config.cpu_isa,
            "torch_threads": compute_config.threads,
            "deterministic_gpu_default": compute_config.deterministic_gpu,
            "cpu_reduction_order": (
                compute_config.cpu_reduction_order
                if device.type == "cpu" or numerics == "universal"
                else "the GPU kernels'"
            ),  # what row_order_drawn reads: the setting wherever it applies
            "environment": {name: os.environ.get(name) for name in isa.NUMERICS_ENV},
            **universal_record(numerics),
        },
        "container": container_info(),
        "bundle": git_info(root),
    }
    conditions["fingerprint"] = fingerprint(conditions)
    return conditions


def fingerprint_fields(conditions: dict) -> dict:
    """The part of the conditions that changes numbers. With the CPU instruction set pinned
    to a floor, the floor stands in for the machine's own instruction sets: any machine at
    or above it computes the same numbers."""
    if conditions["numerics"].get("numerics") == "universal":
        return universal_fingerprint_fields(conditions)
    gpu = conditions["gpu"]
    floor = conditions["numerics"].get("cpu_isa", "native")
    pinned = floor != "native"
    return {
        "device": conditions["device"].split(":")[0],
        "device_name": conditions["device_name"],
        "gpu_driver": gpu.get("driver"),
        "cuda": gpu.get("cuda"),
        "cudnn": gpu.get("cudnn"),
        "cpu_architecture": conditions["cpu"]["architecture"],
        "cpu_isa": floor,
        "cpu_isa_flags": None if pinned else conditions["cpu"]["isa_flags"],
        "torch_cpu_capability": None if pinned else conditions["cpu"]["torch_cpu_capability"],
        "python": conditions["python"]["version"],
        "packages": {name: conditions["packages"].get(name) for name in NUMERIC_PACKAGES},
        "torch_threads": conditions["numerics"]["torch_threads"],
        "environment": {
            name: conditions["numerics"]["environment"].get(name) for name in isa.FINGERPRINT_ENV
        },
    }


def universal_fingerprint_fields(conditions: dict) -> dict:
    """In the universal mode the network's arithmetic is the spec's on every machine: what
    still changes numbers is the spec's version and the game's frames (the emulator and the
    resize), not the device, the CPU, the threads or torch."""
    return {
        "numerics": "universal",
        "numerics_spec": conditions["numerics"]["numerics_spec"],
        "packages": {name: conditions["packages"].get(name) for name in UNIVERSAL_PACKAGES},
    }


def fingerprint(conditions: dict) -> str:
    return json_digest(fingerprint_fields(conditions))


def differences(ours: dict, theirs: dict, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two conditions records."""
    changed = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        path = f"{prefix}{key}"
        if path in RECORDED_SINCE and (key not in ours or key not in theirs):
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += differences(a, b, path + ".")
        elif a != b:
            changed.append(path)
    return changed


ABSENT = object()  # a key one side lacks, told apart from a null it holds


def differing_values(ours: dict, theirs: dict, labels=("ours", "reference")) -> list[str]:
    """`path (ours X, reference Y)` for each key path whose values differ: `absent` where
    a side lacks the key, long values cut where they differ (or named by a short hash)."""
    found: list[str] = []

    def walk(a, b, path: tuple) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key, ABSENT), b.get(key, ABSENT), (*path, str(key)))
        elif a != b or type(a) is not type(b):  # 1 and 1.0: equal, but other digests
            shown_a, shown_b = _shown(a, b), _shown(b, a)
            found.append(f"{'.'.join(path)} ({labels[0]} {shown_a}, {labels[1]} {shown_b})")

    walk(ours, theirs, ())
    return found


def _shown(value, other, width: int = 40) -> str:
    """A value as JSON, cut to `width`; two long values that agree that far are told
    apart by a short SHA-256 of each."""
    if value is ABSENT:
        return "absent"
    text = json.dumps(value, default=str)
    if len(text) <= width:
        return text
    other_text = "" if other is ABSENT else json.dumps(other, default=str)
    if text[: width - 3] == other_text[: width - 3]:
        return f"{text[: width - 16]}... (sha256 {hashlib.sha256(text.encode()).hexdigest()[:8]})"
    return text[: width - 3] + "..."


def write_conditions(compute_config, out_dir: Path) -> dict:
    """The conditions stage: conditions.json, fingerprint.json (what training depends on)
    and the SBOM, into `out_dir`."""
    from reprodqn.core.atomic import write_json

    conditions = collect(compute_config)
    write_json(out_dir / workspace.CONDITIONS, conditions)
    write_json(
        out_dir / workspace.FINGERPRINT,
        {"fingerprint": conditions["fingerprint"], "fields": fingerprint_fields(conditions)},
    )
    write_sbom(out_dir / workspace.SBOM)
    return conditions
