"""Torch's, numpy's and Python's global random generators, watched from exact.setup() on.

A draw from one of them (`nn.Dropout`, a layer's default initialisation, `torch.rand`,
`np.random.*`, `random.*` without a generator, a DataLoader without `generator=`) is in
no resume point: fresh runs agree, and only a resumed run parts from the uninterrupted
one, far from the cause. So setup() takes a fingerprint of each generator's state, and
every checkpoint and resume point compares it with the last one taken: a change is
refused in one line naming the generator and the stretch of the script it happened in.
Refused rather than only named: a chain written past such a draw is one no resume can
reproduce. Fingerprints rather than poison: the legacy numpy functions are bound to their
generator at import, and other libraries draw from Python's through module functions, so
poisoning would mean patching what the script did not ask us to.

Draws before the resume point is loaded are the script building itself (a module's
default initialisation, replaced from a stream), the same in every process: the watch
starts again when load_resume_point has put the run's state back.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reprodqn.core.errors import InputError

if TYPE_CHECKING:
    from torch import nn


@dataclass
class _Watch:
    fingerprints: dict[str, str]
    since: str  # where the last fingerprints were taken, in the script's words


_WATCH: list[_Watch] = []  # one while setup() has started it; empty: nothing is watched


def fingerprints() -> dict[str, str]:
    """A short SHA-256 of each global generator's state (CUDA's where CUDA has started)."""
    import torch

    python_random = importlib.import_module("random")  # its state is read, never drawn from
    legacy = np.random.get_state(legacy=False)  # noqa: NPY002 -- reading it is the point
    numpy_state = (
        legacy["state"]["key"].tobytes()
        + repr((legacy["state"]["pos"], legacy["has_gauss"], legacy["gauss"])).encode()
    )
    states = {
        "torch's global generator (torch.manual_seed)": torch.get_rng_state().numpy().tobytes(),
        "numpy's global generator (np.random.seed)": numpy_state,
        "Python's global generator (random.seed)": repr(python_random.getstate()).encode(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch's CUDA generator on cuda:{index}"] = state.numpy().tobytes()
    return {name: hashlib.sha256(state).hexdigest()[:16] for name, state in states.items()}


def start(since: str) -> None:
    """Watch from here (setup(), then each loaded resume point)."""
    _WATCH[:] = [_Watch(fingerprints(), since)]


def restart(since: str) -> None:
    """Watch from here if watching at all."""
    if _WATCH:
        start(since)


def stop() -> None:
    _WATCH.clear()


def check(place: str) -> None:
    """Refuse if a global generator moved since the last look; else look again from here."""
    if not _WATCH:
        return
    now = fingerprints()
    before = _WATCH[0].fingerprints
    moved = [name for name, value in now.items() if before.get(name, value) != value]
    if moved:
        raise InputError(
            f"{place}: {' and '.join(moved)} drew (or was reseeded) since {_WATCH[0].since}: "
            "no resume point holds it, so a resumed run would part from this one; draw from "
            "a named stream instead (nn.Dropout, F.dropout, default layer initialisation, "
            "torch.rand*, np.random.*, random.*, a DataLoader without generator= draw from "
            "the global ones)"
        )
    _WATCH[:] = [_Watch(now, place)]


def uninitialised(layer: type[nn.Module], *args, device="cpu", **kwargs) -> nn.Module:
    """`layer(*args, **kwargs)` on `device` with empty parameters and buffers: no draw from
    torch's global generator (a layer's default initialisation makes one), to initialise
    from a stream. torch's skip_init does the same, but its move off the meta device goes
    through torch's Python references and imports sympy (0.8 s of each process)."""
    import torch
    from torch import nn

    module = layer(*args, device="meta", **kwargs)
    for part in module.modules():
        for name, parameter in list(part.named_parameters(recurse=False)):
            empty = torch.empty(parameter.shape, dtype=parameter.dtype, device=device)
            setattr(part, name, nn.Parameter(empty, requires_grad=parameter.requires_grad))
        for name, buffer in list(part.named_buffers(recurse=False)):
            setattr(part, name, torch.empty(buffer.shape, dtype=buffer.dtype, device=device))
    return module
