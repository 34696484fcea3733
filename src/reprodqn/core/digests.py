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
    Modules it imports are not covered."""
    script = Path(sys.argv[0])  # under site-packages: a kernel's or tool's launcher
    plain = script.suffix == ".py" and script.is_file() and "site-packages" not in script.parts
    return sha256_file(script) if plain else None


def apart(ours: str, theirs: str, width: int = 12) -> tuple[str, str]:
    """Two digests as a message shows them: their first `width` characters, or both in full
    where those are equal (a change past them read as the same hash twice)."""
    if ours[:width] != theirs[:width]:
        return ours[:width], theirs[:width]
    return ours, theirs
