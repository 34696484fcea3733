"""Where a result replicates, in one sentence decided from the conditions its runs recorded:
REPLICATE.md, `verify` and the report each say it with this sentence.

A run in the universal numerics gives one chain on every CPU; a standard run's numbers
belong to the stack it ran on (its CPU floor, threads, torch and oneDNN, GPU model and
driver). A conditions record without `numerics.numerics` is standard: records made before
the universal numerics existed name no mode."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from reprodqn.core import workspace

UNIVERSAL_REACH = "any x86-64 or aarch64 CPU and any torch the package supports"
# no GPU has run the universal chain yet: this clause changes once `reprodqn gpu-check`
# has shown a GPU giving the CPUs' chain
GPU_NOT_YET = "on an NVIDIA GPU not yet, until gpu-check has shown the same chain there"
STANDARD_ONLY = "another CPU floor, thread count, torch or GPU may part their chains"


def numerics_of(conditions: dict) -> str:
    """The numerics a run's conditions record names: standard where it names none."""
    return (conditions.get("numerics") or {}).get("numerics") or "standard"


def recorded_conditions(root: Path) -> list[dict]:
    """Each run's conditions.json in the workspace or bundle at `root`; where no run has
    one, the study's results/conditions.json (the conditions it was set up under)."""
    root = Path(root)
    paths = sorted((root / workspace.RUNS).glob(f"*/*/{workspace.CONDITIONS}"))
    return folder_conditions(path.parent for path in paths or [workspace.conditions_path(root)])


def folder_conditions(folders: Iterable[Path]) -> list[dict]:
    """Each result folder's own conditions.json (a reprodqn.exact script's run, a study's
    run); a folder without one is left out."""
    return [record for folder in folders if (record := _json(Path(folder) / workspace.CONDITIONS))]


def where_it_replicates(records: Iterable[dict | None], subject: str = "Its results") -> str:
    """The sentence, for runs whose conditions are `records` (a None is a run that recorded
    none, left out); `subject` names them ("This bundle's results")."""
    runs = [record for record in records if record]
    universal = [record for record in runs if numerics_of(record) == "universal"]
    standard = [record for record in runs if numerics_of(record) != "universal"]
    if not runs:
        return (
            f"Where {subject[0].lower()}{subject[1:]} replicate is not known: no run "
            "recorded its conditions."
        )
    if not standard:
        return (
            f"{subject} are in the universal numerics, one chain on every machine: they "
            f"replicate bit for bit {_universal(universal)}."
        )
    if not universal:
        return (
            f"{subject} are in the standard numerics: they replicate bit for bit only on the "
            f"{_stacks(standard)}; {STANDARD_ONLY}."
        )
    return (
        f"{subject} mix the two numerics. {_runs(universal, 'universal')} bit for bit "
        f"{_universal(universal)}. {_runs(standard, 'standard')} only on the "
        f"{_stacks(standard)}; {STANDARD_ONLY}."
    )


def _runs(records: list[dict], numerics: str) -> str:
    """'The 3 universal runs replicate', 'The 1 standard run replicates'."""
    if len(records) == 1:
        return f"The 1 {numerics} run replicates"
    return f"The {len(records)} {numerics} runs replicate"


def _universal(records: list[dict]) -> str:
    """The universal numerics' reach, and the GPUs its runs trained on, if any."""
    gpus = sorted({r.get("device_name", "?") for r in records if _on_gpu(r)})
    trained = (
        f" (they trained on {', '.join(gpus)}, where the universal chain is not yet shown: "
        "a replication on a CPU checks them)"
        if gpus
        else ""
    )
    return f"on {UNIVERSAL_REACH}; {GPU_NOT_YET}{trained}"


def _stacks(records: list[dict]) -> str:
    """The stack, or stacks, standard runs recorded, each once."""
    named = sorted({stack(record) for record in records})
    if len(named) == 1:
        return f"stack their conditions name: {named[0]}"
    return "stacks their conditions name: " + "; ".join(
        f"({number}) {words}" for number, words in enumerate(named, 1)
    )


def stack(conditions: dict) -> str:
    """A standard run's stack in words: CPU and floor, threads, torch, and GPU or none."""
    numerics = conditions.get("numerics") or {}
    cpu = conditions.get("cpu") or {}
    floor = numerics.get("cpu_isa", "native")
    if floor == "native":
        floor = f"native ({cpu.get('torch_cpu_capability', '?')})"
    threads = numerics.get("torch_threads", "?")
    torch = (conditions.get("packages") or {}).get("torch") or "?"
    words = (
        f"{cpu.get('architecture', '?')} CPU at floor {floor}, {threads} "
        f"thread{'' if threads == 1 else 's'}, torch {torch}"
    )
    if not _on_gpu(conditions):
        return f"{words}, no GPU"
    gpu = conditions.get("gpu") or {}
    return (
        f"{words}, {conditions.get('device_name', '?')} with driver {gpu.get('driver') or '?'} "
        f"(CUDA {gpu.get('cuda') or '?'}, cuDNN {gpu.get('cudnn') or '?'})"
    )


def _on_gpu(conditions: dict) -> bool:
    return str(conditions.get("device", "cpu")).startswith("cuda")


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
