"""A reprodqn.exact run folder: one process writing it, and a resume that computes as the
run began or is refused before anything is written.

The first start records the run's config, the command, the conditions and the numerics
settings. A later start of the same folder is a resume when it holds a resume point: the
process settings (device, CPU floor, thread count, numerics mode) must be the run's own,
and the other conditions that change numbers (torch and the numeric packages, Python, the
GPU, its driver, CUDA, the CPU where no floor is pinned) too, unless REPRODQN_FORCE_RESUME=1
says to go on, when the segment's conditions are added to conditions.json. Nothing is
written until every check has passed, load_resume_point's included: a resume's records
wait for the point to be loaded (or for the first checkpoint, where a script loads none).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reprodqn.core import run_lock, workspace
from reprodqn.core.atomic import read_json, write_json
from reprodqn.core.digests import json_digest, running_code_sha256, running_script_sha256
from reprodqn.core.errors import InputError
from reprodqn.determinism import global_generators, kernel_settings, provenance

FORCE_ENV = "REPRODQN_FORCE_RESUME"  # "1": resume on other conditions, recorded per segment
SEGMENTS = "resumed_on_other_conditions"  # conditions.json's list of such segments
KERNELS = "kernels"  # conditions.json: torch.compile and the switches (kernel_settings)
UNIVERSAL_OUTSIDE = "universal_outside"  # conditions.json: parts declared outside the watch

_HELD: dict[Path, contextlib.ExitStack] = {}  # run folders this process holds the lock of
_PENDING: dict[Path, Callable[[], None]] = {}  # a resume's records, written once it is loaded


@dataclass(frozen=True)
class _ComputeRecord:
    """exact.Setup as the conditions record reads reprodqn's compute params."""

    process: Any

    @property
    def device(self) -> str:
        return self.process.device.type

    def __getattr__(self, name: str):
        return getattr(self.process, name)


def _as_json(value: Any) -> Any:
    """A numpy number as the number it is (np.int64(3) is the config 3); else its text."""
    return value.item() if isinstance(value, np.generic) else str(value)


def hold(directory: Path) -> None:
    """Hold the run folder's lock for the rest of this process (the kernel releases it when
    the process ends, however it ends); another process holding it is refused in one line
    naming it, unless REPRODQN_LOCK_WAIT gives seconds to wait."""
    key = Path(directory).resolve()
    if key in _HELD:
        return
    stack = contextlib.ExitStack()
    what = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) or "python"
    stack.enter_context(run_lock.hold(Path(directory), what, run_lock.wait_from_env()))
    _HELD[key] = stack


def release(directory: Path) -> None:
    """Let the folder go before the process ends (tests; a script that trains two runs)."""
    stack = _HELD.pop(Path(directory).resolve(), None)
    _PENDING.pop(Path(directory).resolve(), None)
    kernel_settings.forget(directory)
    if stack is not None:
        stack.close()


def record_pending(directory: Path) -> None:
    """Write a resume's records: its resume point passed every check."""
    if not _PENDING:
        return
    write = _PENDING.pop(Path(directory).resolve(), None)
    if write is not None:
        write()


def before_writing(directory: Path, place: str) -> dict:
    """What a checkpoint or a resume point checks before it writes (the global generators,
    a resumed segment's kernel settings), then the resume's records; the conditions take
    the kernel settings where they changed. Returns the settings for the resume point."""
    global_generators.check(place)
    kernels = kernel_settings.at_save(directory)
    record_pending(directory)
    conditions_path = Path(directory) / workspace.CONDITIONS
    noted = {KERNELS: kernels} | _declared_parts()
    if Path(directory).resolve() in _HELD and conditions_path.exists():
        conditions = read_json(conditions_path, "run conditions")
        if any(conditions.get(key) != value for key, value in noted.items()):
            write_json(conditions_path, conditions | noted)  # a compile after start_run, say
    return kernels


def _declared_parts() -> dict:
    """The parts a universal script declared outside the watch (universal.outside)."""
    guard = sys.modules.get("reprodqn.universal.guard")
    declared = list(getattr(guard, "DECLARED", []))
    return {UNIVERSAL_OUTSIDE: declared} if declared else {}


def start(directory: Path, config: Mapping[str, Any], process: Any) -> dict:
    """exact.start_run: check everything, then write (or defer) the run's records."""
    directory = Path(directory)
    hold(directory)
    config = dict(json.loads(json.dumps(dict(config), default=_as_json)))
    digest, script, code = json_digest(config), running_script_sha256(), running_code_sha256()
    code_record: dict[str, str] | None = code
    recorded = directory / workspace.RUN_CONFIG
    conditions = provenance.collect(_ComputeRecord(process))
    kernel_settings.watch_compile(getattr(process, "numerics", "standard"))
    conditions[KERNELS] = kernel_settings.current()
    resumed_from = None
    if recorded.exists():
        theirs = read_json(recorded, "run config")
        _check_same_run(directory, theirs, config, digest, script)
        _check_same_code(directory, theirs.get("code_sha256") or {}, code)
        resumed_from = workspace.latest_resume_step(directory / workspace.RESUME)
        if resumed_from is not None:  # the code the run began with stays its record
            code_record = {**code, **theirs["code_sha256"]} if "code_sha256" in theirs else None
    segment = None
    if resumed_from is not None:
        began = read_json(directory / workspace.CONDITIONS, "run conditions")
        segment = check_resume_conditions(directory, began, conditions, resumed_from)
    command = {"script": sys.argv[0], "arguments": sys.argv[1:], "cwd": os.getcwd()}
    record = {
        "digest": digest,
        "config": config,
        "command": command,
        "script_sha256": script,
        "code_sha256": code_record,  # the script's own modules: verify --until names one changed
    }
    if code_record is None:  # a run begun before they were recorded: none claimed for it
        del record["code_sha256"]

    def write() -> None:
        clear_leftovers(directory)
        write_json(recorded, record)
        if resumed_from is None:  # a fresh run, or one that starts over: its conditions
            write_json(directory / workspace.CONDITIONS, conditions)
            write_json(directory / workspace.DETERMINISM, process.applied)
        elif segment is not None:
            began = read_json(directory / workspace.CONDITIONS, "run conditions")
            began[SEGMENTS] = [*began.get(SEGMENTS, []), segment]
            write_json(directory / workspace.CONDITIONS, began)
        if not (directory / workspace.SBOM).exists():
            from reprodqn.determinism import sbom

            sbom.link_sbom(directory / workspace.SBOM)

    if resumed_from is None:
        write()
    else:
        _PENDING[directory.resolve()] = write
    return conditions


def clear_leftovers(directory: Path) -> list[str]:
    """Remove what a killed process left half-made (it holds the folder now): atomic
    writes' temporary files, a resume point's staging folder, points no index names.
    Returns their names."""
    resume_dir = directory / workspace.RESUME
    found = [
        path
        for folder in (directory, directory / workspace.CHECKPOINTS, resume_dir)
        for path in (folder.glob(".*.tmp") if folder.is_dir() else ())
    ]
    index = resume_dir / workspace.RESUME_INDEX
    latest = read_json(index, "resume point index").get("directory") if index.exists() else None
    if resume_dir.is_dir():
        found += [p for p in resume_dir.iterdir() if p.is_dir() and p.name != latest]
    for path in found:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return sorted(str(path.relative_to(directory)) for path in found)


def _check_same_run(directory: Path, theirs: dict, config: dict, digest: str, script) -> None:
    """The folder holds a run of this very config and script, or is refused."""
    if None not in (script, theirs.get("script_sha256")) and theirs["script_sha256"] != script:
        writer = _recorded_script(theirs)
        if writer is not None and writer != Path(sys.argv[0]).resolve():
            raise InputError(
                f"{directory}: holds a run written by another script, {writer} (this process "
                f"runs {Path(sys.argv[0]).resolve()}: results never mix); use another "
                "directory or remove it"
            )
        raise InputError(
            f"{directory}: holds a run of another version of {sys.argv[0]} (its SHA-256 "
            "differs: a resumed run would mix two codes); use another directory or remove it"
        )
    if theirs.get("digest") != digest:
        changed = provenance.differing_values(config, theirs.get("config", {}), ("now", "recorded"))
        raise InputError(
            f"{directory}: holds a run with a different config: {'; '.join(changed)}; "
            "give another directory or remove it"
        )


def _check_same_code(directory: Path, theirs: dict, ours: dict) -> None:
    """The script's own modules that both processes loaded are the versions the run began
    with (a module one of them imports lazily, after start_run, is not compared)."""
    changed = [name for name in sorted(set(theirs) & set(ours)) if theirs[name] != ours[name]]
    if changed:
        raise InputError(
            f"{directory}: holds a run of another version of {changed[0]}, a module of "
            f"{sys.argv[0]} (its SHA-256 differs: a resumed run would mix two codes); use "
            "another directory or remove it"
        )


def _recorded_script(record: dict) -> Path | None:
    """The script that wrote a run, as its config.json's command names it (None if it
    names none)."""
    command = record.get("command") or {}
    if not command.get("script"):
        return None
    return (Path(command.get("cwd") or ".") / command["script"]).resolve()


def process_settings(conditions: dict) -> dict:
    """What the process chose that changes numbers: never other on a resume. In the
    universal numerics the device, the CPU floor and the threads change no number."""
    numerics = conditions["numerics"]
    settings = {"numerics": numerics.get("numerics", "standard")}
    if settings["numerics"] != "universal":
        settings["device"] = conditions["device"].split(":")[0]
        settings["cpu floor"] = numerics.get("cpu_isa", "native")
        settings["threads"] = numerics["torch_threads"]
    return settings


def check_resume_conditions(directory: Path, began: dict, now: dict, step: int) -> dict | None:
    """Refuse a resume whose process settings are not the run's own (one line naming both
    values), or whose other conditions that change numbers differ unless forced; a forced
    one returns the segment to record."""
    labels = ("began with", "this process has")
    settings = provenance.differing_values(process_settings(began), process_settings(now), labels)
    if settings:
        raise InputError(
            f"{directory}: resuming at step {step:,} with other process settings: "
            f"{'; '.join(settings)}; a resumed run computes as it began: resume it as it "
            "was started, or use another directory"
        )
    ours, theirs = provenance.fingerprint_fields(began), provenance.fingerprint_fields(now)
    others = provenance.differing_values(ours, theirs, labels)
    if not others:
        return None
    if os.environ.get(FORCE_ENV) != "1":
        raise InputError(
            f"{directory}: resuming at step {step:,} on other conditions: {'; '.join(others)}; "
            f"its numbers would differ from an uninterrupted run's: resume where it began, or "
            f"set {FORCE_ENV}=1 to go on (conditions.json then records the segment)"
        )
    return {"from_step": step, "differs": others, "conditions": theirs}
