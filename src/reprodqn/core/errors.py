"""The error types the CLI turns into a single line and a non-zero exit: bad input (exit 2)
and a machine that failed under a command (exit 3), kept apart so scripts can tell them."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: a params field, a file, a checkpoint. The message is one line
    that names the field or file and what was expected."""


class MachineError(Exception):
    """The machine failed a command that was right: a full disk or quota, an I/O error, a
    read-only filesystem. The message is one line: what could not be written, where, what
    was kept, and what to do."""
