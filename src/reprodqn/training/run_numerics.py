"""A run's numerics mode: the one its config.json recorded (standard where it names none,
as every run trained before the mode existed), kept when the run is resumed with params
that name no mode of their own. The universal default must not switch a run trained in
the standard numerics silently, nor refuse to resume it: the run goes on as it began,
said in one line, and a retraining in the other mode is asked for by name."""

from __future__ import annotations

from pathlib import Path

from reprodqn.config import sources
from reprodqn.config.params import RunConfig
from reprodqn.core import workspace
from reprodqn.core.atomic import read_json

NAMED = "compute.numerics"  # the key that, given on the command line, asks for a mode


def recorded_numerics(run_dir: Path) -> str | None:
    """The mode the run at `run_dir` recorded (None where it records no config)."""
    path = Path(run_dir) / workspace.RUN_CONFIG
    if not path.exists():
        return None
    config = read_json(path, "run config").get("config")
    if not isinstance(config, dict):
        return None
    compute = sources.fill_before_it_existed(dict(config)).get("compute") or {}
    return str(compute.get("numerics", sources.BEFORE_IT_EXISTED[NAMED]))


def named_on_command_line(overrides: list[str] | tuple) -> bool:
    """Whether `--set compute.numerics=...` is among the command's overrides (or its argv)."""
    return any(str(item).split("=", 1)[0].strip() == NAMED for item in overrides)


def keep_recorded_numerics(
    config: RunConfig, run_dir: Path, named: bool
) -> tuple[RunConfig, str | None]:
    """`config` in the mode the run at `run_dir` was trained in, with the line that says
    so, where the params name no mode on the command line and the mode is all that tells
    them from the run's own (with other params changed, the usual refusal stands)."""
    recorded = recorded_numerics(run_dir)
    asked = config.compute.numerics
    if named or recorded is None or recorded == asked:
        return config, None
    raw = config.model_dump(mode="json")
    raw["compute"]["numerics"] = recorded
    try:
        kept = RunConfig.model_validate(raw)
    except ValueError:
        return config, None
    own = read_json(Path(run_dir) / workspace.RUN_CONFIG, "run config").get("digest")
    if kept.digest() != own:
        return config, None
    return kept, (
        f"keeps the {recorded} numerics it was trained in (the params say {asked}; "
        f"--set {NAMED}={asked} --restart trains it anew in the {asked} numerics)"
    )
