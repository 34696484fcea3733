"""Resume points: a training run's whole state, composed from its parts' own states.

Each part (streams, emulator, frame history, replay memory, learner, counters) gives its
state as a tree of JSON values, numpy arrays, bytes and torch tensors. A point is one
directory: arrays in .npy files (the replay memory is gigabytes, read back memory-mapped),
tensors in one safetensors file, everything else in state.json. resume/latest.json names
the point with every file's SHA-256 and is replaced atomically only after the directory is
complete, so a SIGKILL at any moment leaves the previous point intact.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file as load_tensors
from safetensors.torch import save_file as save_tensors

from reprodqn.core import workspace
from reprodqn.core.atomic import fsync_dir, read_json, write_json
from reprodqn.core.digests import sha256_file
from reprodqn.core.errors import InputError

TENSORS = "learner.safetensors"
ARRAY, BYTES, TENSOR = "__npy__", "__base64__", "__tensor__"  # what state.json points at
NUMPY, TUPLE = "__numpy__", "__tuple__"  # a numpy scalar (dtype and bytes), a tuple's items
MARKERS = (ARRAY, BYTES, TENSOR, NUMPY, TUPLE)


@dataclass(frozen=True)
class ResumePoint:
    path: Path
    state: dict
    index: dict  # latest.json: the step, the files' SHA-256 and what the writer added


def save(resume_dir: Path, step: int, state: dict, index: dict | None = None) -> None:
    """Write the point for `step`, then make it the latest; older points are removed.
    `index` adds fields to latest.json (exact's resume points: which parts are objects).
    A tensor on a GPU is recorded with its device and returns there unless load names one."""
    name = f"step-{step:09d}"
    target, staging = resume_dir / name, resume_dir / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    devices: dict[str, str] = {}
    try:
        files = _write_point(staging, state, devices)
    except BaseException:  # a full disk, a kill: no half-written point is left behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    fsync_dir(resume_dir)
    extra = {**(index or {}), **({"tensor_devices": devices} if devices else {})}
    write_json(
        resume_dir / workspace.RESUME_INDEX,
        {**extra, "step": step, "directory": name, "files": files},
    )
    for old in resume_dir.iterdir():
        if old.is_dir() and old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def _write_point(staging: Path, state: dict, devices: dict[str, str]) -> dict[str, str]:
    """The point's files in `staging`, synced; their SHA-256 by name."""
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(state, "", staging, tensors)
    devices.update({k: str(t.device) for k, t in tensors.items() if t.device.type != "cpu"})
    _unshare(tensors)
    save_tensors(tensors, str(staging / TENSORS))
    (staging / "state.json").write_text(json.dumps(encoded, sort_keys=True))
    files = {}
    for path in sorted(staging.iterdir()):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        files[path.name] = sha256_file(path)
    fsync_dir(staging)
    return files


def kept_point(resume_dir: Path) -> str:
    """What a failed run keeps, in words: its last good resume point, if any."""
    try:
        step = workspace.latest_resume_step(resume_dir)
    except InputError:
        step = None
    if step is None:
        return "no resume point yet, so the run starts again from step 0"
    return f"the last good resume point (step {step:,}) is intact"


def load(resume_dir: Path, device: torch.device | str | None = None) -> ResumePoint | None:
    """The latest point, every file checked against its recorded hash; None if there is
    none. Arrays come back memory-mapped (0-d ones in memory): the parts copy them into
    their own buffers. Tensors come back on `device`, or where each was saved if None."""
    latest_path = resume_dir / workspace.RESUME_INDEX
    if not latest_path.exists():
        return None
    latest = read_json(latest_path, "resume point index")
    point = resume_dir / str(latest.get("directory", ""))
    if not latest.get("directory") or not point.is_dir():  # an edited or corrupt index
        held = sorted(p.name for p in resume_dir.iterdir() if p.is_dir()) or ["none"]
        raise InputError(
            f"{latest_path}: names the point folder {latest.get('directory')!r}, which "
            f"{resume_dir} does not hold (its folders: {', '.join(held)}): the index was "
            "changed or corrupted; restore it, or start the run over in another directory"
        )
    for name, expected in latest.get("files", {}).items():
        path = point / name
        if not path.exists():
            raise InputError(f"{path}: missing from the resume point")
        if sha256_file(path) != expected:
            raise InputError(f"{path}: SHA-256 does not match {latest_path} (corrupted)")
    tensors = load_tensors(str(point / TENSORS), device=str(device or "cpu"))
    if device is None:
        for key, where in latest.get("tensor_devices", {}).items():
            tensors[key] = tensors[key].to(where)
    state = _decode(read_json(point / "state.json", "resume state"), point, tensors)
    return ResumePoint(point, state, latest)


def _unshare(tensors: dict[str, torch.Tensor]) -> None:
    """safetensors refuses tensors that share memory (tied weights, views): each its own."""
    seen: set[int] = set()
    for key, tensor in tensors.items():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in seen:
            tensors[key] = tensor.clone()
        seen.add(pointer)


def _encode(value, path: str, directory: Path, tensors: dict):
    if isinstance(value, dict):
        return {
            key: _encode(item, f"{path}.{key}" if path else key, directory, tensors)
            for key, item in value.items()
        }
    if isinstance(value, torch.Tensor):
        tensors[path] = value.detach().cpu().contiguous()
        return {TENSOR: path}
    if isinstance(value, np.ndarray):
        np.save(directory / f"{path}.npy", value, allow_pickle=False)
        return {ARRAY: f"{path}.npy"}
    if isinstance(value, np.generic):  # its dtype and its bytes: np.float32(0.1) stays so
        data = base64.b64encode(np.asarray(value).tobytes()).decode()
        code = value.dtype.char  # its very type (longlong, not int64); a unit needs the descr
        exact_code = np.dtype(code) == value.dtype
        return {
            NUMPY: code if exact_code else np.lib.format.dtype_to_descr(value.dtype),
            BYTES: data,
        }
    if isinstance(value, bytes):
        return {BYTES: base64.b64encode(value).decode()}
    if isinstance(value, list | tuple):  # a list of arrays: each its own file, as in a dict
        items = [
            _encode(item, f"{path}.{index}" if path else str(index), directory, tensors)
            for index, item in enumerate(value)
        ]
        return {TUPLE: items} if isinstance(value, tuple) else items
    return value


def _decode(value, directory: Path, tensors: dict):
    if isinstance(value, dict):
        if TENSOR in value:
            return tensors[value[TENSOR]]
        if ARRAY in value:
            array = np.load(directory / value[ARRAY], mmap_mode="r", allow_pickle=False)
            return np.array(array) if array.ndim == 0 else array
        if NUMPY in value:
            code = value[NUMPY]
            single = isinstance(code, str) and len(code) == 1
            dtype = np.dtype(code) if single else np.lib.format.descr_to_dtype(_descr(code))
            return np.ndarray((), dtype=dtype, buffer=base64.b64decode(value[BYTES]))[()]
        if BYTES in value:
            return base64.b64decode(value[BYTES])
        if TUPLE in value:
            return tuple(_decode(item, directory, tensors) for item in value[TUPLE])
        return {key: _decode(item, directory, tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item, directory, tensors) for item in value]
    return value


def _descr(descr):
    """A structured dtype's descr as JSON gives it back (lists) as numpy reads it (tuples)."""
    if not isinstance(descr, list):
        return descr
    fields = []
    for name, dtype, *shape in descr:
        name = tuple(name) if isinstance(name, list) else name  # (title, name)
        fields.append((name, _descr(dtype), *(tuple(s) for s in shape)))
    return fields
