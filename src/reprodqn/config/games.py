"""Which Atari games env.game may name: every ROM the installed ale-py ships, by its own
snake_case id (`ale_py.roms.get_all_rom_ids()`), and each game's Gymnasium-style name
(ALE's convention: `pong` -> `Pong`, `space_invaders` -> `SpaceInvaders`)."""

from __future__ import annotations

import difflib
from functools import cache


@cache
def rom_ids() -> tuple[str, ...]:
    """The ROM ids of the installed ale-py, sorted."""
    from ale_py import roms  # the emulator's own list, never one of ours to drift

    return tuple(sorted(roms.get_all_rom_ids()))


def display_name(game: str) -> str:
    """The game's name as ALE's registered ids spell it (`ALE/{name}-v5`)."""
    return game.title().replace("_", "")


def unknown_game(game: str) -> str | None:
    """None if ale-py ships the game; otherwise what is wrong, naming the nearest ids (a
    Gymnasium-style name such as SpaceInvaders finds its snake_case id)."""
    known = rom_ids()
    if game in known:
        return None
    squashed = game.lower().replace("_", "").replace("-", "")
    by_name = {display_name(g).lower(): g for g in known}
    if squashed in by_name:
        hint = [by_name[squashed]]
    else:
        hint = difflib.get_close_matches(game.lower(), known, n=3, cutoff=0.6)
    nearest = f" (nearest: {', '.join(hint)})" if hint else ""
    return f"expected a ROM id the installed ale-py ships{nearest}"
