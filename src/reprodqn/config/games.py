"""Which Atari games env.game may name: every game the installed ale-py ships, by its own
snake_case ROM id (`ale_py.roms.get_all_rom_ids()`, less the four with no single-player
mode), and each game's Gymnasium-style name (ALE's convention: `pong` -> `Pong`,
`space_invaders` -> `SpaceInvaders`)."""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError


@cache
def rom_ids() -> tuple[str, ...]:
    """The games of the installed ale-py, sorted: the ROMs it registers as `ALE/{Name}-v5`
    (those with a single-player mode; ALE ends the process on loading the others)."""
    import ale_py  # the emulator's own lists, never one of ours to drift
    import gymnasium
    from ale_py.registration import rom_id_to_name

    gymnasium.register_envs(ale_py)
    return tuple(
        sorted(
            rom
            for rom in ale_py.roms.get_all_rom_ids()
            if f"ALE/{rom_id_to_name(rom)}-v5" in gymnasium.registry
        )
    )


def _unplayable() -> set[str]:
    """The ROMs the installed ale-py ships but cannot play (rom_ids leaves them out)."""
    import ale_py

    return set(ale_py.roms.get_all_rom_ids()) - set(rom_ids())


def display_name(game: str) -> str:
    """The game's name as ALE's registered ids spell it (`ALE/{name}-v5`)."""
    return game.title().replace("_", "")


def unknown_game(game: str) -> str | None:
    """None if ale-py ships the game; otherwise what is wrong, naming the nearest ids (a
    Gymnasium-style name such as SpaceInvaders finds its snake_case id)."""
    known = rom_ids()
    if game in known:
        return None
    if game in _unplayable():
        return (
            f"ale-py ships {game}'s ROM, but the game has no single-player mode and ALE "
            f"ends the process that loads it (it registers no ALE/{display_name(game)}-v5); "
            f"expected one of the {len(known)} games it plays"
        )
    squashed = game.lower().replace("_", "").replace("-", "")
    by_name = {display_name(g).lower(): g for g in known}
    if squashed in by_name:
        hint = [by_name[squashed]]
    else:
        hint = difflib.get_close_matches(game.lower(), known, n=3, cutoff=0.6)
    nearest = f" (nearest: {', '.join(hint)})" if hint else ""
    return f"expected one of the {len(known)} games the installed ale-py ships{nearest}"


def game_named(name: str) -> str | None:
    """The game an id or name means, as a policy file may carry it: `seaquest`, `Seaquest`,
    `ALE/Seaquest-v5`, `reprodqn/Seaquest-v0`, `SeaquestNoFrameskip-v4`; None for none of
    the installed ale-py's games."""
    base = re.sub(r"(NoFrameskip|Deterministic)?(-v\d+)?$", "", name.strip().split("/")[-1])
    squashed = base.lower().replace("_", "").replace("-", "")
    return {display_name(g).lower(): g for g in rom_ids()}.get(squashed)


def _shipped_rom(game: str) -> str:
    problem = unknown_game(game)
    if problem:
        raise PydanticCustomError("unknown_rom", problem)
    return game


GameId = Annotated[str, AfterValidator(_shipped_rom)]  # env.game's type
