"""`make docs-tables`: the other-games page's table of every game the installed ale-py
ships, with what decides how the authors' Breakout rules carry over to it (FIRE, lives at
the reset screen) and the rules that follow, read from ALE itself."""

from __future__ import annotations

import re

from reprodqn.config.games import display_name, rom_ids
from reprodqn.training.atari import FIRE, Emulator
from tools.package_graph import ROOT

PAGE = ROOT / "docs" / "games.md"
GAMES_TABLE = re.compile(r"(<!-- games -->\n)(.*?)(<!-- /games -->)", re.S)


def game_rules(game: str) -> dict:
    """What ALE says of the game, and the rules reprodqn applies to it."""
    emulator = Emulator(game, 0.0, None, 84)
    emulator.reset_game()
    actions, lives = emulator.action_set, emulator.lives()
    fire = f"at {actions.index(FIRE)}" if FIRE in actions else "none"
    return {
        "game": game,
        "id": f"reprodqn/{display_name(game)}-v0",
        "actions": len(actions),
        "fire": fire,
        "lives": lives,
        "training": "terminal" if lives else "never happens",
        "evaluation": ("the authors' sweep" if FIRE in actions else "plays on")
        if lives
        else "never happens",
    }


def games_table() -> str:
    rows = [
        "| game (`env.game`) | env id | actions | FIRE | lives | a lost life in training"
        " | in evaluation |",
        "|---|---|---|---|---|---|---|",
    ]
    for game in rom_ids():
        r = game_rules(game)
        rows.append(
            f"| `{game}` | `{r['id']}` | {r['actions']} | {r['fire']} | {r['lives']} | "
            f"{r['training']} | {r['evaluation']} |"
        )
    return "\n".join(rows) + "\n"


def page_with_table(text: str) -> str:
    return GAMES_TABLE.sub(lambda m: m.group(1) + games_table() + m.group(3), text)


if __name__ == "__main__":
    PAGE.write_text(page_with_table(PAGE.read_text()))
