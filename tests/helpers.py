"""What many test modules share: the repository's paths, a smoke-sized params overlay, a
tiny training run, subprocess environments, and small builders (labelled frames, optimizer
overrides, synthetic studies). Fixtures live in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"

# A smoke-sized run of the real trainer: a few hundred steps, updates from step 200; as a
# params overlay (for whole pipelines) and as --set overrides (for single runs).
TINY_OVERLAY = {
    "agent": {
        "network": "nips",
        "batch_size": 8,
        "target_sync_every": 100,
        "epsilon_decay_steps": 300,
    },
    "replay": {"capacity": 1000, "learning_starts": 200},
    "train": {"steps": 600, "checkpoint_every": 200, "resume_every": 300, "log_every": 100},
}
TINY = [
    f"{section}.{key}={value}"
    for section, values in TINY_OVERLAY.items()
    for key, value in values.items()
]

# the other optimizers DQN was trained with, as --set overrides (DeepMind 2015; Dopamine)
CENTERED = ["agent.optimizer=rmsprop_centered", "agent.loss_reduction=sum"]
ADAM = ["agent.optimizer=adam", "agent.learning_rate=6.25e-5", "agent.loss=mse"]


def train_tiny(params, run_dir: Path, group: str = "deterministic", run: int = 0) -> list:
    """Train to completion in this process; returns the hashes.jsonl lines."""
    from reprodqn.config.params import resolve_run
    from reprodqn.core.workspace import read_hashes
    from reprodqn.training.loop import train

    for _ in train(resolve_run(params, group, run), run_dir):
        pass
    return read_hashes(run_dir)


def stop_after_first_resume_point(params, run_dir: Path) -> int:
    """Train until the first resume point is written, then stop as a crash would."""
    from reprodqn.config.params import resolve_run
    from reprodqn.core.events import ResumePointWritten
    from reprodqn.training.loop import train

    events = train(resolve_run(params, "deterministic", 0), run_dir)
    for event in events:
        if isinstance(event, ResumePointWritten):
            events.close()
            return event.step
    raise AssertionError("no resume point written")


def train_command(
    runs: Path, overrides: list[str], group: str = "deterministic", run: int = 0
) -> list[str]:
    """`reprodqn train` of GROUP/RUN (deterministic/0) into `runs`, as a subprocess's argv."""
    argv = [
        sys.executable,
        "-m",
        "reprodqn.cli",
        "train",
        "--group",
        group,
        "--run",
        str(run),
        "--params",
        str(PARAMS),
        "--runs-dir",
        str(runs),
    ]
    for item in overrides:
        argv += ["--set", item]
    return argv


def cli_env(**extra: str) -> dict:
    """The environment for a subprocess: this venv's tools first on PATH."""
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def write_params(*args: str, env: dict | None = None, cwd: Path | None = None) -> None:
    """`reprodqn params ARGS` in a subprocess, as a reader runs it; raises if it fails."""
    subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", "params", *args],
        check=True,
        capture_output=True,
        env=env or cli_env(),
        cwd=cwd,
    )


def label(n: int) -> np.ndarray:
    """A 2x2 uint8 frame that encodes n (unique up to 2**32)."""
    return np.frombuffer(np.uint32(n).tobytes(), np.uint8).reshape(2, 2).copy()


def fake_run(group, index, curve, chains=None, steps=(0, 100, 200)):
    """A run whose checkpoint scores are `curve` (two episodes each, mean = curve)."""
    from reprodqn.report.analysis import RunResult

    chains = chains or [f"w{s}" for s in steps]
    result = RunResult(
        group,
        index,
        [
            {"step": s, "weights_sha256": w, "loss_chain_sha256": f"l{w}"}
            for s, w in zip(steps, chains, strict=True)
        ],
    )
    result.steps = list(steps)
    result.scores = {s: [c - 1.0, c + 1.0] for s, c in zip(steps, curve, strict=True)}
    result.conditions = {"device_name": "cpu"}
    return result


def fake_study(deterministic_runs=None):
    """Six groups of three runs with known spreads (the deterministic and gpu ones none)."""
    return {
        "deterministic": deterministic_runs
        or [fake_run("deterministic", i, [1, 5, 3]) for i in range(3)],
        "gpu": [fake_run("gpu", i, [1, 5, 3]) for i in range(3)],
        "environment": [
            fake_run("environment", i, c) for i, c in enumerate([[0, 2, 1], [0, 4, 4], [0, 6, 2]])
        ],
        "exploration": [
            fake_run("exploration", i, c) for i, c in enumerate([[1, 5, 5], [1, 7, 6], [1, 9, 4]])
        ],
        "initialization": [
            fake_run("initialization", i, c)
            for i, c in enumerate([[2, 3, 1], [1, 10, 9], [0, 2, 2]])
        ],
        "minibatch": [
            fake_run("minibatch", i, c) for i, c in enumerate([[1, 5, 3], [1, 6, 3], [1, 5, 4]])
        ],
    }
