"""The universal mode's one error: a NaN, or an op it does not cover. The run stops with
one line naming the op (the CLI's exit 2, as any bad input)."""

from __future__ import annotations

from reprodqn.core.errors import InputError


class NumericsError(InputError):
    """A NaN, or an op the universal mode does not cover: the run stops, naming it."""
