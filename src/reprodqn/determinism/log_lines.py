"""A log's lines as a resume point saw them: one SHA-256 a line, so that a line changed
since (a flipped byte, an edit) is refused at resume naming the file and the line. Without
it a resumed run cut the log back to the point's length and wrote on after a corrupt line,
and its chain carried the corruption on to verify."""

from __future__ import annotations

import hashlib
from pathlib import Path

from reprodqn.core.errors import InputError

RECORD = "lines_sha256"  # the key in a chain's resume state


def digests(path: Path, length: int) -> list[str]:
    """The SHA-256 of each line in the log's first `length` bytes."""
    return [hashlib.sha256(line).hexdigest() for line in _lines(path, length)]


def check(path: Path, state: dict) -> None:
    """Refuse a log whose first bytes are not the lines the resume point recorded (states
    saved before these digests were kept are not checked)."""
    recorded, length = state.get(RECORD), int(state.get("bytes", 0))
    if recorded is None:
        return
    size = path.stat().st_size if path.exists() else 0
    if size < length:
        raise InputError(
            f"{path}: {size} bytes, fewer than the {length} the resume point recorded (cut or "
            "replaced since); restore it, or start the run over in another directory"
        )
    found = digests(path, length)
    if found == recorded:
        return
    pairs = zip(found, recorded, strict=False)
    number = next((n for n, (now, then) in enumerate(pairs, 1) if now != then), None)
    number = number or min(len(found), len(recorded)) + 1  # as many bytes, other line breaks
    raise InputError(
        f"{path}: line {number} is not as the resume point recorded it (changed since it was "
        "written: a flipped byte or an edit); restore the file, or start the run over in "
        "another directory"
    )


def _lines(path: Path, length: int) -> list[bytes]:
    if not length:
        return []
    with open(path, "rb") as handle:
        return handle.read(length).splitlines(keepends=True)


def files_digest(paths: list[Path]) -> str:
    """SHA-256 over each file's name and bytes, in the order given (a chain's result logs)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()
