"""A run's game: what a trained run played (its config.json's env.game, its checkpoints'
action count), checked against the game a command is asked to play, so that one game's
network never plays another (Pong's six outputs indexing Breakout's four actions) and a
mistaken game is one line naming both, not a score or a traceback."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError


def trained_game(run_dir: Path) -> str | None:
    """The game the run's config.json says it trained on (None where it has none)."""
    path = Path(run_dir) / workspace.RUN_CONFIG
    if not path.exists():
        return None
    env = (read_json(path, "run config").get("config") or {}).get("env") or {}
    game = env.get("game")
    return str(game) if game is not None else None


def trained_actions(run_dir: Path) -> int | None:
    """The action count the run's first checkpoint records (None where it has none)."""
    from reprodqn.determinism.checkpoints import read_metadata

    found = sorted(workspace.checkpoints_dir(run_dir).glob("step-*.safetensors"))
    if not found:
        return None
    recorded = read_metadata(found[0]).get("n_actions")
    return int(recorded) if recorded is not None and recorded.isdigit() else None


def check_run_game(run_dir: Path, game: str) -> None:
    """The run at `run_dir` was trained on `game` with its action count; else one line
    naming both games and the setting that plays the run's own."""
    from reprodqn.training.atari import minimal_action_set

    trained, actions = trained_game(run_dir), trained_actions(run_dir)
    asked = len(minimal_action_set(game))
    if trained in (None, game) and actions in (None, asked):
        return
    if trained not in (None, game):
        count = f" ({actions} actions)" if actions is not None else ""
        what, remedy = f"trained on {trained}{count}", f"; play it with --set env.game={trained}"
    else:
        what, remedy = f"its network has {actions} actions", ""
    raise InputError(f"{run_dir}: {what}, but asked to play {game} ({asked} actions){remedy}")
