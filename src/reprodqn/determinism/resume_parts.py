"""What reprodqn.exact's resume points hold of a script's parts, and how each is put back.

A part is an object with state (a module, an optimizer, anything with get_state()/
set_state() or state_dict()/load_state_dict(), a list of such: a vector of environments)
or a plain value (numbers, strings, bytes, numpy scalars and arrays, tensors, and lists,
tuples and dicts of them). Every value comes back with its type: a numpy float32 stays a
float32, a tuple a tuple, a tensor keeps its dtype and device; what cannot come back so
(an object array, a subclass, a sparse tensor) is refused at saving, naming it, before a
point is written. An object saved must be asked for at loading, and an object asked for
must have been saved: a part left out would be dropped without a word. Plain values may
be left out at loading (the script reads them from what load returns); arrays, tensors,
lists and dicts asked for are put back in place, so a script keeps its own objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.determinism import kernel_settings, resume

SCALARS = (bool, int, float, str, bytes, type(None))
ARRAYS = (np.ndarray, np.memmap)  # np.matrix, masked and record arrays would come back plain
TENSORS = (torch.Tensor, torch.nn.Parameter)
SAVABLE_DTYPES = frozenset(  # what safetensors writes (0.8): no complex128, no float8_e8m0
    {torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.bool}
    | {torch.int64, torch.int32, torch.int16, torch.int8}
    | {torch.uint64, torch.uint32, torch.uint16, torch.uint8}
    | {torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz}
)
OBJECTS = "objects"  # latest.json: the parts that were objects with state
KERNELS = "kernels"  # latest.json: what chose the kernels (kernel_settings)


def save(run: Path, step: int, parts: dict[str, Any], kernels: dict | None = None) -> None:
    """Write the parts as the run's latest resume point, with the kernel settings it ran."""
    state = {name: _plain(_state_of(part), name) for name, part in parts.items()}
    objects = sorted(name for name, part in parts.items() if _is_object(part))
    index = {OBJECTS: objects} | ({KERNELS: kernels} if kernels is not None else {})
    resume.save(workspace.resume_dir(run), step, state, index)


def load(run: Path, parts: dict[str, Any], device: str | None) -> dict | None:
    """Check the parts against the run's latest point, then put each back: the objects in
    memory first, the logs and chains (which cut files back) last, so a refusal leaves
    every file as it was. Returns the saved states by name, None with no point."""
    point = resume.load(workspace.resume_dir(run), None if device is None else torch.device(device))
    if point is None:
        return None
    kernel_settings.resumed(run, int(point.index["step"]), point.index.get(KERNELS))
    missing = sorted(set(parts) - set(point.state))
    if missing:
        raise InputError(f"{point.path}: resume point has no state for {missing}")
    saved_objects = point.index.get(OBJECTS)
    not_asked = sorted(set(saved_objects or ()) - set(parts))
    if not_asked:
        raise InputError(
            f"{point.path}: resume point holds {not_asked}, which this run does not ask for "
            f"(it asks for {sorted(parts)}): give every part that was saved"
        )
    if saved_objects is not None:  # points from before the list was kept are not checked
        were_values = sorted(set(parts) & set(point.state) - set(saved_objects))
        were_values = [name for name in were_values if _is_object(parts[name])]
        if were_values:
            raise InputError(f"{point.path}: {were_values} were saved as plain values, not parts")
    for name, part in parts.items():  # every part's own check, before any is restored
        check(part, point.state[name])
    for name in sorted(parts, key=lambda name: _cuts_files(parts[name])):
        restore(name, parts[name], point.state[name])
    return point.state


def check(part: Any, state: Any) -> None:
    """A part's own check of its saved state against what is on disk (a chain's lines)."""
    if _is_vector(part) and isinstance(state, dict):
        for index, item in enumerate(part):
            check(item, state.get(str(index)))
    elif hasattr(part, "check_state"):
        part.check_state(state)


def restore(name: str, part: Any, state: Any) -> None:
    """Put the saved state back into the part, in place."""
    if _is_vector(part):
        if len(state) != len(part):
            raise InputError(
                f"{name}: resume point holds {len(state)} states for this run's {len(part)} parts"
            )
        for index, item in enumerate(part):
            restore(f"{name}[{index}]", item, state[str(index)])
    elif isinstance(part, torch.optim.Optimizer):
        slots = {int(k): v for k, v in state["state"].items()}
        part.load_state_dict({"state": slots, "param_groups": state["param_groups"]})
    elif hasattr(part, "get_state") and hasattr(part, "set_state"):
        part.set_state(state)
    elif hasattr(part, "state_dict") and hasattr(part, "load_state_dict"):
        part.load_state_dict(state)
    elif isinstance(part, np.ndarray | torch.Tensor):
        _restore_array(name, part, state)
    elif isinstance(part, list):
        part[:] = [_writable(item) for item in state]
    elif isinstance(part, dict) and isinstance(state, dict):
        part.clear()
        part.update({key: _writable(item) for key, item in state.items()})
    # tuples and scalars cannot be changed in place: they are returned only


def _is_object(part: Any) -> bool:
    return (
        isinstance(part, torch.optim.Optimizer)
        or (hasattr(part, "get_state") and hasattr(part, "set_state"))
        or (hasattr(part, "state_dict") and hasattr(part, "load_state_dict"))
        or _is_vector(part)
    )


def _cuts_files(part: Any) -> bool:
    """A log or a chain: restoring it cuts its file back to the point."""
    items = part if _is_vector(part) else [part]
    return any(hasattr(item, "start_over") for item in items)


def _is_vector(part: Any) -> bool:
    """A list or tuple of stateful parts (a vector of environments), not of plain values."""
    return isinstance(part, list | tuple) and any(
        not isinstance(item, list | tuple) and _is_object(item) for item in part
    )


def _state_of(part: Any) -> Any:
    if _is_vector(part):
        return {str(index): _state_of(item) for index, item in enumerate(part)}
    if isinstance(part, torch.optim.Optimizer):
        state = part.state_dict()  # JSON keys are strings: the slots' integer ids as text
        return {**state, "state": {str(k): v for k, v in state["state"].items()}}
    if hasattr(part, "get_state") and hasattr(part, "set_state"):
        return part.get_state()
    if hasattr(part, "state_dict") and hasattr(part, "load_state_dict"):
        return part.state_dict()
    return part


def _plain(value: Any, where: str) -> Any:
    """The value, checked to come back as it is: anything resume.save cannot give back
    with its type is refused in one line naming where it is."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or "/" in key or key in resume.MARKERS:
                raise InputError(
                    f"{where}: key {key!r}: expected a string without '/' "
                    f"(and none of {', '.join(resume.MARKERS)})"
                )
        return {key: _plain(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return type(value)(_plain(item, f"{where}[{index}]") for index, item in enumerate(value))
    if isinstance(value, np.generic | np.ndarray):
        if isinstance(value, np.ndarray) and type(value) not in ARRAYS:
            _refuse(where, value, "give np.asarray() of it")
        if value.dtype.hasobject:
            _refuse(where, value, "an array of Python objects cannot be saved without pickle")
        return value
    if isinstance(value, torch.Tensor):
        return _tensor(value, where)
    if type(value) not in SCALARS:
        _refuse(
            where,
            value,
            "expected a module, an optimizer, an object with get_state()/set_state() or "
            "state_dict()/load_state_dict(), or numbers, strings, bytes, numpy scalars, "
            "arrays, tensors and lists, tuples and dicts of them",
        )
    return value


def _tensor(value: torch.Tensor, where: str) -> torch.Tensor:
    if type(value) not in TENSORS:
        _refuse(where, value, "give a plain torch.Tensor")
    if value.layout != torch.strided or value.is_quantized or value.device.type == "meta":
        _refuse(where, value, f"a {value.layout} tensor on {value.device} cannot be saved")
    if value.dtype not in SAVABLE_DTYPES:
        _refuse(where, value, f"its dtype {value.dtype} cannot be written to safetensors")
    return value


def _refuse(where: str, value: Any, why: str) -> None:
    raise InputError(
        f"{where}: a value of type {type(value).__name__} cannot be saved in a resume point "
        f"and come back as it was ({why})"
    )


def _restore_array(name: str, part: np.ndarray | torch.Tensor, state: Any) -> None:
    saved = state
    if isinstance(part, torch.Tensor) and not isinstance(state, torch.Tensor):
        saved = torch.as_tensor(np.asarray(state))
    if tuple(saved.shape) != tuple(part.shape) or saved.dtype != part.dtype:
        raise InputError(
            f"{name}: resume point holds {saved.dtype} {tuple(saved.shape)}; this run has "
            f"{part.dtype} {tuple(part.shape)}"
        )
    if isinstance(part, torch.Tensor):
        with torch.no_grad():
            part.copy_(saved)
    else:
        part[...] = saved


def _writable(value: Any) -> Any:
    """A saved array comes back memory-mapped and read-only: a list's own copy of it."""
    return np.array(value) if isinstance(value, np.ndarray) else value
