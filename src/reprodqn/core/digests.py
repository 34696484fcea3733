"""Digests: SHA-256 of a JSON value in its canonical form, and of a file's bytes. Every run,
evaluation, params and record digest in reprodqn is made here, one way."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces: the same bytes for the same value on every machine."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def json_digest(value: Any) -> str:
    """SHA-256 of a JSON value's canonical form: how every digest here is made."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def sha256_file(path: str | Path) -> str:
    """Read in 4 MiB chunks: checkpoints and replay files never sit in memory whole."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def running_script_sha256() -> str | None:
    """The running script's SHA-256 (None from an interactive session, a notebook or an
    installed entry point), so a run folder is resumed only by the script that began it.
    Its own modules: running_code_sha256."""
    script = _running_script()
    return sha256_file(script) if script is not None else None


def running_code_sha256() -> dict[str, str]:
    """The SHA-256 of each module of the script's own loaded so far: every .py file under
    the script's folder that this process imported (a local models.py, a package beside
    it), by its path from that folder; not installed packages, nor reprodqn, whose version
    the conditions record. Empty where running_script_sha256 is None."""
    script = _running_script()
    if script is None:
        return {}
    root = script.resolve().parent
    found = {script.name: sha256_file(script)}  # run as __main__, or by a launcher
    interpreter = _interpreter_trees()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "reprodqn" or name.startswith("reprodqn."):
            continue
        path = Path(file).resolve()
        # a pyenv, conda env or --target folder under the script's folder is not its code
        installed = not {"site-packages", "dist-packages"}.isdisjoint(path.parts) or any(
            tree in path.parents for tree in interpreter
        )
        if path.suffix == ".py" and root in path.parents and not installed and path.is_file():
            found[path.relative_to(root).as_posix()] = sha256_file(path)
    return dict(sorted(found.items()))


def _interpreter_trees() -> set[Path]:
    """Where this interpreter's standard library and installed packages live."""
    import sysconfig

    trees = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}
    return {Path(tree).resolve() for tree in trees if tree}


def _running_script() -> Path | None:
    script = Path(sys.argv[0])  # under site-packages: a kernel's or tool's launcher
    plain = script.suffix == ".py" and script.is_file() and "site-packages" not in script.parts
    return script if plain else None


def apart(ours: str, theirs: str, width: int = 12) -> tuple[str, str]:
    """Two digests as a message shows them: their first `width` characters, or both in full
    where those are equal (a change past them read as the same hash twice)."""
    if ours[:width] != theirs[:width]:
        return ours[:width], theirs[:width]
    return ours, theirs
