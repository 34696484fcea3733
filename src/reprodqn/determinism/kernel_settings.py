"""What chooses a process's kernels besides its conditions: torch.compile and the switches a
script can turn after setup(). A resume under others is refused, naming both, as another
thread count or CPU floor is.

torch.compile changes the kernels that run (inductor fuses ops and contracts their sums),
so a run compiled for its resume only parted from the uninterrupted one with no record
saying why. Each resume point now holds `kernels`: every torch.compile call of the
process (backend, mode, dynamic shapes, options; "off" for none) and, in the standard
numerics, torch's thread count, deterministic-algorithms and cuDNN switches and fp32
precisions as the script leaves them. The run's conditions.json holds the latest record.

torch.compile compiles lazily, so the record is of calls: setup() wraps torch.compile to
note each call's settings (the compiling is torch's own), and graphs dynamo compiled with
no noted call are recorded as such. A resume is checked twice: at load_resume_point, a
compile the point did not have is refused before anything is restored; at the segment's
first checkpoint or resume point, before it is written, every setting must be the
point's (a compile called after the point was loaded, or one left out).

May import: core.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from reprodqn.core.errors import InputError

OFF = "off"
NAMES = {
    "torch_compile": "torch.compile",
    "torch_threads": "torch threads",
    "deterministic_algorithms": "deterministic algorithms",
    "cudnn_deterministic": "cuDNN deterministic",
    "cudnn_benchmark": "cuDNN benchmark",
    "fp32_precision": "fp32 precision",
}
UNSEEN = "graphs compiled with no call seen (torch.compile before setup(), or torch._dynamo)"
_WATCHING = "_reprodqn_records_calls"

_CALLS: list[str] = []  # this process's torch.compile calls, described, in first-call order
_MODE = ["standard"]  # the numerics mode: in the universal one only compile chooses kernels
_EXPECTED: dict[Path, tuple[int, dict]] = {}  # a resumed run's point: its step and kernels


def watch_compile(numerics: str = "standard") -> None:
    """Note every torch.compile call from here on (nn.Module.compile calls it too)."""
    import torch

    _MODE[0] = numerics
    if getattr(torch.compile, _WATCHING, False):
        return
    original = torch.compile

    @functools.wraps(original)
    def compile(*args, **kwargs):
        if not kwargs.get("disable", False):
            described = describe_call(kwargs)
            if described not in _CALLS:
                _CALLS.append(described)
        return original(*args, **kwargs)

    setattr(compile, _WATCHING, True)
    setattr(torch, "compile", compile)  # noqa: B010 -- torch's own function, wrapped


def describe_call(kwargs: dict[str, Any]) -> str:
    """A compile call's settings that choose kernels, in words: 'inductor, mode default'."""
    backend = kwargs.get("backend") or "inductor"
    if not isinstance(backend, str):
        backend = getattr(backend, "__name__", type(backend).__name__)
    words = [backend, f"mode {kwargs.get('mode') or 'default'}"]
    if kwargs.get("dynamic") is not None:
        words.append(f"dynamic {kwargs['dynamic']}")
    if kwargs.get("options"):
        words.append(f"options {json.dumps(kwargs['options'], sort_keys=True, default=str)}")
    return ", ".join(words)


def _compile_record() -> str | list[str]:
    if _CALLS:
        return list(_CALLS)
    utils = sys.modules.get("torch._dynamo.utils")
    graphs = getattr(utils, "counters", {}).get("stats", {}).get("unique_graphs", 0)
    return [UNSEEN] if graphs else OFF


def current() -> dict:
    """This process's kernel settings now."""
    record: dict[str, Any] = {"torch_compile": _compile_record()}
    if _MODE[0] == "universal":  # torch's switches choose none of universal's kernels
        return record
    import torch

    cudnn = torch.backends.cudnn
    return record | {
        "torch_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "fp32_precision": {
            "cuda_matmul": torch.backends.cuda.matmul.fp32_precision,
            "cudnn_conv": cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
            "mkldnn": torch.backends.mkldnn.fp32_precision,
        },
    }


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "on (" + "; ".join(value) + ")"
    return json.dumps(value, sort_keys=True)


def _differing(saved: dict, now: dict, keys) -> list[str]:
    return [
        f"{NAMES.get(key, key)} (the run had {_shown(saved[key])}, this process has "
        f"{_shown(now.get(key))})"
        for key in keys
        if key in saved and saved[key] != now.get(key)
    ]


def _refusal(run: Path, step: int, differing: list[str]) -> InputError:
    return InputError(
        f"{run}: resuming at step {step:,} with other kernels: {'; '.join(differing)}; a "
        "resumed run computes as it began: resume it as it was started (torch.compile "
        "included), or use another directory"
    )


def resumed(run: Path, step: int, saved: dict | None) -> None:
    """At load: refuse a compile the point did not have; the rest waits for the first save."""
    if saved is None:  # a point from before kernels were recorded
        return
    now = current()
    calls, had = now["torch_compile"], saved.get("torch_compile", OFF)
    if isinstance(calls, list) and not set(calls) <= set(had if isinstance(had, list) else []):
        raise _refusal(run, step, _differing(saved, now, ["torch_compile"]))
    _EXPECTED[Path(run).resolve()] = (step, saved)


def at_save(run: Path) -> dict:
    """At a checkpoint or resume point: a resumed segment's first is refused unless every
    setting is its point's. Returns the settings to record."""
    now = current()
    expected = _EXPECTED.get(Path(run).resolve())
    if expected is not None:
        step, saved = expected
        differing = _differing(saved, now, list(saved))
        if differing:
            raise _refusal(run, step, differing)
        _EXPECTED.pop(Path(run).resolve(), None)
    return now


def forget(run: Path) -> None:
    """The run's folder let go (tests; a script that trains two runs)."""
    _EXPECTED.pop(Path(run).resolve(), None)
