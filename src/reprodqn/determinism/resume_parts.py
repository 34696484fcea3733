"""What reprodqn.exact's resume points hold of a script's parts, and how each is put back.

A part is a module, an optimizer, anything with get_state()/set_state() or
state_dict()/load_state_dict(), a list of such (a vector of environments), or a plain value
(numbers, strings, numpy arrays, tensors, and lists and dicts of them). Arrays, tensors and
lists of plain values are put back in place, so a script that holds them keeps its own
objects; anything else is refused at saving, naming the part, before a point is written.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from reprodqn.core.errors import InputError

SCALARS = (bool, int, float, str, type(None))


def state_of(name: str, part: Any) -> Any:
    """The part's state as resume.save writes it; a value it cannot write is one line."""
    return _plain(_state_of(part), name)


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
        part[:] = [_writable(item) for item in state]  # tuples and scalars: returned only


def _stateful(part: Any) -> bool:
    return (
        isinstance(part, torch.optim.Optimizer)
        or (hasattr(part, "get_state") and hasattr(part, "set_state"))
        or (hasattr(part, "state_dict") and hasattr(part, "load_state_dict"))
    )


def _is_vector(part: Any) -> bool:
    """A list or tuple of stateful parts (a vector of environments), not of plain values."""
    return isinstance(part, list | tuple) and any(_stateful(item) for item in part)


def _state_of(part: Any) -> Any:
    if _is_vector(part):
        return {str(index): _state_of(item) for index, item in enumerate(part)}
    if isinstance(part, torch.optim.Optimizer):
        state = part.state_dict()  # JSON keys are strings: the slots' integer ids as text
        groups = json.loads(json.dumps(state["param_groups"]))
        return {"state": {str(k): v for k, v in state["state"].items()}, "param_groups": groups}
    if hasattr(part, "get_state") and hasattr(part, "set_state"):
        return part.get_state()
    if hasattr(part, "state_dict") and hasattr(part, "load_state_dict"):
        return part.state_dict()
    return part


def _plain(value: Any, where: str) -> Any:
    """The value with numpy scalars as the numbers they are; anything resume.save cannot
    write (it takes JSON scalars, arrays, tensors, bytes, lists and dicts) is refused."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or "/" in key:
                raise InputError(f"{where}: key {key!r}: expected a string without '/'")
        return {key: _plain(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()  # a numpy counter, written as the number it is
    if not isinstance(value, (*SCALARS, bytes, np.ndarray, torch.Tensor)):
        raise InputError(
            f"{where}: a value of type {type(value).__name__} cannot be saved in a resume "
            "point (expected a module, an optimizer, an object with get_state()/set_state() "
            "or state_dict()/load_state_dict(), or numbers, strings, arrays, tensors and "
            "lists and dicts of them)"
        )
    return value


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
