"""How a universal run names its numerics in its records: each chain line, each checkpoint's
metadata and the conditions carry the mode and the spec's version; a standard run's records
carry neither, as before the mode existed. A chain is labelled universal only in a process
set up in the mode: exact.setup's watch over every op from setup on, or reprodqn's own
agent's watch over each update and greedy action."""

from __future__ import annotations

import sys

from reprodqn.universal.errors import NumericsError
from reprodqn.universal.reference import SPEC_VERSION

_SET_UP: list[str] = []  # the numerics this process was set up in (configure_universal)


def set_up(numerics: str) -> None:
    _SET_UP[:] = [numerics]


def forget() -> None:
    """As if the process had not been set up (a test run's next test, in pytest's process)."""
    _SET_UP.clear()


def universal_record(numerics: str) -> dict[str, str]:
    """{'numerics': 'universal', 'numerics_spec': version} in the universal mode; {} else."""
    if numerics != "universal":
        return {}
    return {"numerics": "universal", "numerics_spec": SPEC_VERSION}


def chain_marks(numerics: str) -> dict[str, str]:
    """A chain's marks: universal only where the process was set up so, else refused."""
    if numerics == "universal" and _SET_UP and _SET_UP != ["universal"]:
        raise NumericsError(
            f"HashChain: numerics universal in a process set up {_SET_UP[0]}: a chain is "
            "labelled universal only where every float op was universal's "
            "(exact.setup(numerics='universal') watches them all)"
        )
    return universal_record(numerics)


def check_weights(weights, place: str) -> None:
    """Refuse, under the process's watch, weights still holding torch's initial draw."""
    guard = sys.modules.get("reprodqn.universal.guard")
    if guard is None or not guard.watching_process():
        return
    named = weights.named_parameters() if hasattr(weights, "named_parameters") else weights.items()
    drawn = guard.torch_drawn(named)
    if drawn:
        raise NumericsError(
            f"{place}: {', '.join(drawn)} still hold torch's initial draw (its kernels, its "
            "global generator), not universal's: initialise them with universal.init_, or "
            "load a state into them"
        )
