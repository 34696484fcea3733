"""What the training loop yields: progress printing and experiment tracking consume these,
so neither lives inside the loop (dqn_zoo's habit) and neither imports the trainer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Started:
    step: int
    total: int
    resumed: bool
    learning_starts: int = 0  # updates begin after this step: progress rates per phase


@dataclass(frozen=True)
class Stepped:
    """Every few agent steps, so progress can report by time between process records."""

    step: int


@dataclass(frozen=True)
class ProcessRecord:
    step: int
    record: dict


@dataclass(frozen=True)
class CheckpointWritten:
    step: int
    weights_sha256: str
    loss_chain_sha256: str
    updates: int
    path: Path


@dataclass(frozen=True)
class ResumePointWritten:
    step: int


@dataclass(frozen=True)
class Finished:
    step: int
    already: bool = False
