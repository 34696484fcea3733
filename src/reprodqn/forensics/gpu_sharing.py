"""Runs sharing one device, on the standard path and the fast one (compute.replay_on_device
and compute.cuda_graphs): each K runs at once, every run's chain held to the chain it has
alone, and the agent steps per second they make, in all and per run, both over the whole
run (start-up included) and after annealing (epsilon at its final value: 95% of the
paper's 20M steps, where 9 steps in 10 need a greedy forward). What gpu-check sweeps and
bench/gpu_throughput.py measures at length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprodqn.core import workspace
from reprodqn.core.errors import InputError

# the fast path on a GPU; a CPU runs its replay part (graphs need CUDA)
FAST = {
    "cuda": ["compute.replay_on_device=true", "compute.cuda_graphs=true"],
    "cpu": ["compute.replay_on_device=true"],
}


def paths(device: str) -> dict[str, list[str]]:
    return {"standard": [], "fast": FAST[device]}


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
    launch, params: Path, settings: list[str], device: str, sharing: list[int], out: Path, log: Path
) -> dict:
    """K runs of the deterministic group's seeds at once, for each K and path, by
    `launch(runs, params, overrides, runs_dir, log) -> seconds`; their chains go under
    "chains" ({path: {k: [chain per run]}}) for the caller to compare."""
    rates: dict[str, dict[str, Any]] = {}
    chains: dict[str, dict[str, list]] = {}
    for path, extra in paths(device).items():
        rates[path], chains[path] = {}, {}
        try:
            _sweep_path(
                launch,
                params,
                [*settings, *extra],
                sharing,
                out / path,
                log,
                rates[path],
                chains[path],
            )
        except InputError as error:  # what it measured, and the other path's, still count
            rates[path]["failed"] = failure(error, log)
    return {"rates": rates, "chains": chains}


def failure(error: Exception, log: Path, lines: int = 12) -> str:
    """What failed, and the last lines its processes wrote."""
    tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
    return "\n".join([str(error), *tail])


def _sweep_path(launch, params, overrides, sharing, out, log, rates, chains) -> None:
    for k in sharing:
        runs_dir = out / f"sharing-{k}"
        seconds = launch([("deterministic", i) for i in range(k)], params, overrides, runs_dir, log)
        dirs = [workspace.run_dir(runs_dir, "deterministic", i) for i in range(k)]
        per_run = [annealed_rate(d) for d in dirs]
        steps = workspace.read_hashes(dirs[0])[-1]["step"]
        rates[str(k)] = {
            "whole_runs": k * steps / seconds,
            "annealed": sum(r for r in per_run if r) if all(per_run) else None,
            "annealed_per_run": per_run,
        }
        chains[str(k)] = [workspace.read_hashes(d) for d in dirs]


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
