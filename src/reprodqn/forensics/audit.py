"""The nondeterminism audit (`reprodqn audit`, after Chen et al.'s profile-and-patch): run a
few of the study's updates, acting forwards, a target copy and one evaluation chunk under a
dispatch mode; list every aten overload executed with what torch's documentation says of
it on CUDA (optable); and check the rest of what determinism rests on: no draw from a
global RNG, thread counts, the instruction-set floor, cuBLAS and cuDNN settings, library
versions. Writes results/audit.json; the report cites it."""

from __future__ import annotations

import importlib.metadata
import os
import random as global_random  # read, never drawn from: the audit checks nobody does
import warnings
from pathlib import Path

import numpy as np
import torch

from reprodqn.core.atomic import write_json
from reprodqn.determinism import isa, numerics, provenance
from reprodqn.dqn.network import q_values
from reprodqn.forensics import optable
from reprodqn.forensics.trace import NamedModuleTracker, OpRecorder, Window

UPDATES = 3
LIBRARIES = ("torch", "numpy", "ale-py", "opencv-python-headless", "safetensors")


def _global_rng_states() -> dict[str, bytes]:
    """Fingerprints of every global RNG: a draw from one changes its state."""
    return {
        "python random": repr(global_random.getstate()).encode(),
        "numpy.random": repr(np.random.get_state(legacy=False)).encode(),  # noqa: NPY002
        "torch default generator": torch.random.get_rng_state().numpy().tobytes(),
    }


def _exercise(run, recorder: OpRecorder, chunk: int) -> None:
    """What a study run executes, at its real network and batch size: play until a
    minibatch can be drawn, then updates, an acting forward, a target copy, an evaluation
    chunk. Updates are called through learn() at steps its cadence updates on."""
    agent, cfg = run.agent, run.config
    fill = cfg.env.history_length + cfg.agent.n_step + 4 * cfg.agent.batch_size + 100
    while len(run.replay) < fill:  # enough valid transitions for any variant's sampler
        run.advance()
    every = cfg.agent.update_every
    first = (cfg.replay.learning_starts // every + 1) * every
    for k in range(UPDATES):
        agent.learn(first + k * every, run.replay, run.streams["minibatch"])
    agent.sync_target()
    with recorder.during("act"):
        agent.greedy_action(run.history.frames)
    states = np.stack([run.history.frames] * chunk)
    with recorder.during("evaluate"):
        q_values(agent.online, states, chunk)


def _op_table(ops: list[list]) -> list[dict]:
    seen: dict[str, dict] = {}
    for _, name, phase, module, _hashes in ops:
        entry = seen.setdefault(name, {"op": name, "count": 0, "phases": set(), "modules": set()})
        entry["count"] += 1
        entry["phases"].add(phase)
        if module:
            entry["modules"].add(module)
    table = []
    for entry in seen.values():
        status, words = optable.classify(entry["op"])
        table.append(
            {
                **entry,
                "phases": sorted(entry["phases"]),
                "modules": sorted(entry["modules"])[:6],
                "cuda": status,
                "documentation": words,
            }
        )
    return sorted(table, key=lambda e: (e["cuda"] == optable.NOT_LISTED, e["op"]))


def _settings(applied: dict) -> dict:
    cudnn = torch.backends.cudnn
    return {
        "threads": {
            "torch intra-op": torch.get_num_threads(),
            "torch inter-op": torch.get_num_interop_threads(),
            **{k: os.environ.get(k) for k in isa.THREAD_ENV},
        },
        "instruction_set": {
            "torch cpu capability": torch.backends.cpu.get_cpu_capability(),
            **{k: os.environ.get(k) for k in isa.KNOBS},
        },
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "cudnn": {
            "deterministic": cudnn.deterministic,
            "benchmark": cudnn.benchmark,
            "conv fp32_precision": cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
        },
        "cuda matmul fp32_precision": torch.backends.cuda.matmul.fp32_precision,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "applied": applied,
        "libraries": {name: _version(name) for name in LIBRARIES},
    }


def designed_sources(compute, device: torch.device) -> list[str]:
    """The sources of nondeterminism this run's settings turn on by design (the gpu group's)."""
    sources = []
    if device.type == "cuda" and not compute.deterministic_gpu:
        sources.append("compute.deterministic_gpu: false (nondeterministic CUDA kernels allowed)")
    if device.type == "cpu" and compute.cpu_reduction_order == "random":
        sources.append(
            "compute.cpu_reduction_order: random (each update sums its "
            "minibatch's rows in an order drawn from OS entropy)"
        )
    return sources


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def audit(config, chunk: int, out: Path, scratch: Path) -> dict:
    """Run the audit for one run's config and write `out` (results/audit.json)."""
    from reprodqn.training.loop import Run

    compute = config.compute
    device, applied = numerics.configure(compute.device, compute.threads, compute.deterministic_gpu)
    before = _global_rng_states()
    run = Run(config, scratch, device)
    run.agent.graphs = None  # op by op: the eager kernels a graph would replay
    tracker = NamedModuleTracker({"online": run.agent.online, "target": run.agent.target})
    recorder = OpRecorder(tracker)
    Window(run, recorder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        numerics.use_deterministic_algorithms(True, warn_only=True)  # alerts become warnings
        try:
            with tracker, recorder:
                _exercise(run, recorder, chunk)
        finally:
            numerics.use_deterministic_algorithms(compute.deterministic_gpu)
    after = _global_rng_states()
    ops = _op_table(recorder.ops)
    touched = sorted(name for name in before if before[name] != after[name])
    result = {
        "torch": torch.__version__,
        "device": str(device),
        "table": {"torch_version": optable.TORCH_VERSION, "sources": list(optable.SOURCES)},
        "exercised": {
            "updates": UPDATES,
            "network": config.agent.network,
            "batch_size": config.agent.batch_size,
            "evaluation_chunk": chunk,
        },
        "ops": ops,
        "cuda_summary": {
            status: sorted(e["op"] for e in ops if e["cuda"] == status)
            for status in (
                optable.DETERMINISTIC_UNDER_FLAG,
                optable.RAISES_UNDER_FLAG,
                optable.CUBLAS,
            )
        },
        "global_rng_used": touched,
        "nondeterminism_by_design": designed_sources(compute, device),
        "determinism_warnings": sorted(
            {str(w.message).splitlines()[0] for w in caught if "determinis" in str(w.message)}
        ),
        "settings": _settings(applied),
    }
    result["conditions_fingerprint"] = provenance.collect(compute)["fingerprint"]
    result["summary"] = summary(result)  # what the report quotes
    write_json(out, result)
    return result


def summary(result: dict) -> str:
    """One paragraph: what ran and what it needs on CUDA."""
    cuda = result["cuda_summary"]
    made, raises, cublas = (
        cuda[optable.DETERMINISTIC_UNDER_FLAG],
        cuda[optable.RAISES_UNDER_FLAG],
        cuda[optable.CUBLAS],
    )
    rng = ", ".join(result["global_rng_used"]) or "none"
    return (
        f"audit: {len(result['ops'])} aten overloads ran ({result['exercised']['updates']}"
        f" updates, acting, target copy, an evaluation chunk); on CUDA {len(made)} need "
        f"use_deterministic_algorithms ({', '.join(made) or '-'}), {len(cublas)} need "
        f"CUBLAS_WORKSPACE_CONFIG ({', '.join(cublas) or '-'}), {len(raises)} would raise"
        f"{' (' + ', '.join(raises) + ')' if raises else ''}; global RNGs drawn from: "
        f"{rng}; determinism warnings: {len(result['determinism_warnings'])}; "
        "nondeterminism by design: "
        f"{'; '.join(result.get('nondeterminism_by_design', [])) or 'none'}"
    )
