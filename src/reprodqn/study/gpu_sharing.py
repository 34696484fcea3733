"""Runs sharing one device, on the standard path and the fast one (compute.replay_on_device
and compute.cuda_graphs): each K runs at once, every run's chain held to the chain it has
alone, and the agent steps per second they make, in all and per run, both over the whole
run (start-up included) and after annealing (epsilon at its final value: 95% of the
paper's 20M steps, where 9 steps in 10 need a greedy forward). What gpu-check sweeps and
bench/gpu_throughput.py measures at length."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprodqn.core import workers, workspace
from reprodqn.core.errors import InputError

# the numerics both paths compute in unless the command names another: the fast path's
# device replay and graphs are the standard numerics' (the universal mode refuses them)
STANDARD_NUMERICS = "compute.numerics=standard"
# the fast path on a GPU; a CPU runs its replay part (graphs need CUDA)
FAST = {
    "cuda": ["compute.replay_on_device=true", "compute.cuda_graphs=true"],
    "cpu": ["compute.replay_on_device=true"],
}


def paths(device: str) -> dict[str, list[str]]:
    return {"standard": [], "fast": FAST[device]}


def in_standard_numerics(overrides: list[str]) -> list[str]:
    """`overrides` computed in the standard numerics, where they name no mode of their own
    (a later --set wins, so one naming universal runs that mode's chain)."""
    return [STANDARD_NUMERICS, *overrides]


def annealed_rate(run_dir: Path) -> float | None:
    """A run's agent steps/s over the intervals that began with epsilon annealed: the
    process records after the first one that reached the final value, weighted by steps."""
    records = [
        json.loads(line)
        for line in (run_dir / workspace.PROCESS).read_text().splitlines()
        if line.strip()
    ]
    final = min((r["epsilon"] for r in records), default=None)
    steps = seconds = 0.0
    last_step, annealed = None, False
    for record in records:
        if annealed and last_step is not None and record["steps_per_second"] > 0:
            interval = record["step"] - last_step
            steps += interval
            seconds += interval / record["steps_per_second"]
        annealed = annealed or record["epsilon"] == final
        last_step = record["step"]
    return steps / seconds if seconds else None


def sweep(
    launch,
    params: Path,
    settings: list[str],
    device: str,
    sharing: list[int],
    out: Path,
    log: Path,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """K runs of the deterministic group's seeds at once, for each K and path, by
    `launch(runs, params, overrides, runs_dir, log) -> seconds`; their chains go under
    "chains" ({path: {k: [chain per run]}}) for the caller to compare. Both paths at one K
    before the next K, so that a sweep cut short has compared them as far as it went;
    `progress` is given both so far after each K. A path that fails is tried no further;
    its reason is kept, and the other path goes on."""
    from reprodqn.config.params import load_params

    rates: dict[str, dict[str, Any]] = {path: {} for path in paths(device)}
    chains: dict[str, dict[str, list]] = {path: {} for path in paths(device)}
    per_group = load_params(params, settings).study.runs_per_group
    for k in sharing:
        for path, extra in paths(device).items():
            if "failed" in rates[path]:
                continue
            runs_dir = out / path / f"sharing-{k}"
            try:
                seconds = launch(
                    [("deterministic", *_placed(runs_dir, i, per_group)) for i in range(k)],
                    params,
                    [*settings, *extra],
                    runs_dir,
                    log,
                )
            except InputError as error:  # what it measured, and the other path's, still count
                rates[path]["failed"] = failure(error, log)
                continue
            rates[path][str(k)], chains[path][str(k)] = _measured_runs(
                runs_dir, k, per_group, seconds
            )
        if progress is not None:
            progress({"rates": rates, "chains": chains})
    return {"rates": rates, "chains": chains}


def failure(error: Exception, log: Path, lines: int = 12) -> str:
    """What failed, and the last lines its processes wrote."""
    tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
    return "\n".join([str(error), *tail])


def _placed(runs_dir: Path, i: int, per_group: int) -> tuple[int, Path]:
    """The i-th of K runs sharing the device: a run of the deterministic group (they share
    every seed) in a folder of its own; past the group's runs_per_group, copies of its runs
    in further folders (--run takes only the group's indices)."""
    return i % per_group, runs_dir / f"copy-{i // per_group}"


def _measured_runs(runs_dir: Path, k: int, per_group: int, seconds: float) -> tuple[dict, list]:
    """K runs' rates (whole runs; after annealing, in all and each) and their chains."""
    dirs = [
        workspace.run_dir(folder, "deterministic", run)
        for run, folder in (_placed(runs_dir, i, per_group) for i in range(k))
    ]
    per_run = [annealed_rate(d) for d in dirs]
    steps = workspace.read_hashes(dirs[0])[-1]["step"]
    rates = {
        "whole_runs": k * steps / seconds,
        "annealed": sum(r for r in per_run if r) if all(per_run) else None,
        "annealed_per_run": per_run,
    }
    return rates, [workspace.read_hashes(d) for d in dirs]


def study_holds(params: Path, overrides: list[str]) -> dict:
    """How many of the study's own runs (its replay capacity, not this check's short one)
    this machine's memory holds on one GPU, on each path: the most a study can share."""
    from reprodqn.config.params import load_params
    from reprodqn.dqn.replay import replay_bytes

    study = load_params(params, overrides)
    size = replay_bytes(study.replay.capacity, study.env.screen_size)
    return {
        "capacity": study.replay.capacity,
        "standard": workers.memory_holds(workers.Footprint(host_bytes=size), 1),
        "fast": workers.memory_holds(workers.Footprint(gpu_bytes=size), 1),
    }


def measured(by_k: dict) -> dict[str, dict]:
    """A path's rates by K, less a failure's record."""
    return {k: rate for k, rate in by_k.items() if k != "failed"}


def best_sharing(rates: dict[str, dict]) -> tuple[str, int, float]:
    """The path and K with the most agent steps/s in all after annealing (else whole runs)."""
    best = ("standard", 1, 0.0)
    for path, by_k in rates.items():
        for k, rate in measured(by_k).items():
            value = rate["annealed"] or rate["whole_runs"]
            if value > best[2]:
                best = (path, int(k), value)
    return best


def table(rates: dict[str, dict]) -> list[str]:
    """The sweep as a Markdown table: both paths side by side at each K."""
    lines = [
        "| path | runs sharing the device | agent steps/s in all, after annealing | per run "
        "| in all, whole runs (start-up included) |",
        "|---|---|---|---|---|",
    ]
    for path, by_k in rates.items():
        if "failed" in by_k:
            lines.append(f"| {path} | failed: {by_k['failed'].splitlines()[0]} | | | |")
        for k, rate in measured(by_k).items():
            annealed = rate["annealed"]
            cells = [f"{annealed:.1f}", f"{annealed / int(k):.1f}"] if annealed else ["n/a", "n/a"]
            lines.append(f"| {path} | {k} | {' | '.join(cells)} | {rate['whole_runs']:.1f} |")
    return lines
