"""A script's main function run as reprodqn's own commands run: the library's refusals as
one line and an exit code, a real bug with its traceback (`reprodqn.exact.main`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from reprodqn.core import storage
from reprodqn.core.errors import InputError, MachineError


def main(function: Callable[[], object]) -> None:
    """Run a script's main function as reprodqn's commands run: a refusal of this library
    (bad input, exit 2) or a machine that failed under it (a full disk, exit 3) is one
    line on stderr, `SCRIPT: error: ...`, with no traceback; anything else is a bug and
    keeps its traceback. Exits with the function's return value if it is an int, else 0.
    Use it as `if __name__ == "__main__": exact.main(main)`."""
    name = Path(sys.argv[0]).name or "python"
    try:
        result = function()
    except InputError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except MachineError as error:
        print(f"{name}: machine error: {error}", file=sys.stderr)
        sys.exit(3)
    except Exception as error:  # a full disk or quota met while writing
        found = storage.describe(error, name, Path.cwd(), "every file already written is whole")
        if found is None:
            raise
        print(f"{name}: machine error: {found}", file=sys.stderr)
        sys.exit(3)
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)
