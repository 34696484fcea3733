"""The study's design in params.yaml: the paper's six groups, each differing from the
deterministic one in one source of nondeterminism, how many agents each trains, and which
are left out."""

from __future__ import annotations

from pydantic import Field, model_validator

from reprodqn.config.types import Frozen, PositiveInt, Seed
from reprodqn.determinism import rng
from reprodqn.determinism.provenance import row_order_drawn

GROUP_NAMES = ("deterministic", "gpu", "environment", "exploration", "initialization", "minibatch")
# what a reader is told the gpu group is when it ran on a CPU (compute.cpu_reduction_order),
# or on a GPU in the universal numerics, whose kernels are deterministic there too
GPU_ON_CPU = "gpu (CPU: reduction order drawn at random, emulating nondeterministic GPU kernels)"
GPU_UNIVERSAL = (
    "gpu (universal kernels: reduction order drawn at random, emulating nondeterministic GPU "
    "kernels)"
)


def group_label(
    group: str, device_type: str, reduction_order: str, numerics: str = "standard"
) -> str:
    """A group's name as every table, figure and MLflow run shows it."""
    if group != "gpu" or not row_order_drawn(reduction_order, device_type, numerics):
        return group
    return GPU_ON_CPU if device_type == "cpu" else GPU_UNIVERSAL


class GroupConfig(Frozen):
    """One group of the study: the seed it varies and the settings it changes."""

    vary: rng.RunStream | None = Field(
        None, description="The seed that differs between this group's runs, if any."
    )
    seeds: list[Seed] = Field(
        default_factory=list, description="Run r's seed for the varied stream: seeds[r]."
    )
    set: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="Dotted overrides of the base config for this group."
    )

    @model_validator(mode="after")
    def _varied_seed_not_set(self) -> GroupConfig:
        if self.vary and f"seeds.{self.vary}" in self.set:
            raise ValueError(
                f"set.seeds.{self.vary}: this group varies {self.vary}, so its "
                f"runs take it from seeds, not set"
            )
        return self


class StudyConfig(Frozen):
    """The six-group sensitivity study of the paper."""

    runs_per_group: PositiveInt = Field(5, description="Agents trained per group.")
    groups: dict[str, GroupConfig] = Field(description="The six groups of the paper.")
    left_out: list[str] = Field(
        default_factory=list, description="Groups not trained (none by default)."
    )

    @model_validator(mode="after")
    def _groups_are_the_papers(self) -> StudyConfig:
        unknown = sorted(set(self.groups) - set(GROUP_NAMES)) + sorted(
            set(self.left_out) - set(self.groups)
        )
        if unknown:
            raise ValueError(f"unknown group {unknown[0]!r} (expected {', '.join(GROUP_NAMES)})")
        for name, group in self.groups.items():
            if group.vary and len(group.seeds) < self.runs(name):
                raise ValueError(
                    f"group {name!r} varies {group.vary} but lists {len(group.seeds)} seeds "
                    f"for {self.runs(name)} runs"
                )
        if not self.runs("deterministic"):  # the ranker is its run 0
            raise ValueError("left_out: the deterministic group must be trained")
        return self

    def runs(self, group: str) -> int:
        """How many agents a group trains: none if it is left out."""
        return 0 if group in self.left_out or group not in self.groups else self.runs_per_group

    def run_ids(self) -> list[tuple[str, int]]:
        """Every (group, run) the study trains, group by group; left-out groups have none."""
        return [(group, run) for group in self.groups for run in range(self.runs(group))]

    def studied_groups(self) -> list[str]:
        """The groups with at least one run."""
        return [group for group in self.groups if self.runs(group)]
