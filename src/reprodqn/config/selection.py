"""The params of the paper's start-state method (candidates, ranker, select): random start
sequences, ranked by a trained DQN's max-Q, a draw from the top. Part of params.yaml's
schema (config.py), kept apart so that each module stays one concern."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from reprodqn.config.types import Frozen, PositiveInt, Seed
from reprodqn.core.errors import InputError


class StartStatesConfig(Frozen):
    """Start sequences: random candidates, ranked by max-Q, a draw from the top."""

    candidates: PositiveInt = Field(1000, description="Random start sequences generated.")
    noop_prefix: Annotated[int, Field(ge=0)] = Field(
        2,
        description="NOOP frames before the random part (every line of the authors' "
        "files/initstates.txt starts with two).",
    )
    min_length: PositiveInt = Field(55, description="Shortest random part, in emulator frames.")
    max_length: PositiveInt = Field(95, description="Longest random part, in emulator frames.")
    top_k: PositiveInt = Field(250, description="Best-ranked candidates kept by max-Q.")
    selected: PositiveInt = Field(100, description="Drawn from the top_k for evaluation.")
    candidates_seed: Seed = Field(123, description="Candidates stream.")
    selection_seed: Seed = Field(123, description="Selection stream.")

    @model_validator(mode="after")
    def _consistent(self) -> StartStatesConfig:
        if self.min_length > self.max_length:
            raise ValueError("min_length must not exceed max_length")
        if not self.selected <= self.top_k <= self.candidates:
            raise ValueError("expected selected <= top_k <= candidates")
        return self


class RankerConfig(Frozen):
    """The DQN that ranks the candidate start sequences."""

    steps: PositiveInt = Field(5_000_000, description="Agent steps of the ranking DQN.")
    checkpoint: str | None = Field(
        None, description="Use this weights file instead of training a ranker."
    )


def check_ranker_checkpoint(ranker: RankerConfig) -> None:
    """A named ranker weights file must exist before any stage starts (relative paths from
    the workspace), not when the select stage reaches it hours later."""
    if ranker.checkpoint is not None and not Path(ranker.checkpoint).is_file():
        raise InputError(
            f"ranker.checkpoint: {ranker.checkpoint}: no such weights file (expected a "
            "checkpoint .safetensors, relative to the workspace; null trains a ranker)"
        )
