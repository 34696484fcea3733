"""Writing files so that a crash at any moment leaves either the old file or the new one:
write to a temporary file beside the target, flush it to disk, then rename over it."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from reprodqn.core.errors import InputError


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file that replaces `path` only if the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    permissions = file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, permissions)
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


@contextlib.contextmanager
def no_empty_folder_left(path: Path) -> Iterator[None]:
    """If the block fails, remove `path` when the block made it and left it empty: a
    command that wrote nothing leaves no trace."""
    made = not path.exists()
    try:
        yield
    except BaseException:
        if made and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        raise


def file_mode(path: Path) -> int:
    """The mode open() would leave `path` with: its own if it exists, else 0o666 less the
    umask (mkstemp's 0o600 would hide a study's results from the rest of a lab's group)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~umask()


def umask() -> int:
    """The process's umask, read without changing it (os.umask can only set it, which
    another thread could see) where Linux says it; else set and put back."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def write_json(path: str | Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path, what: str = "file") -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{path}: {what} is not valid JSON (corrupted?)") from None


def append_line(path: Path, line: str) -> None:
    """Append one line and flush it to disk (a resume point records the file's length)."""
    with open(path, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def truncate(path: Path, length: int) -> None:
    """Cut a log back to the length a resume point recorded (drops lines written after it)."""
    if path.exists():
        with open(path, "r+b") as handle:
            handle.truncate(length)
    elif length:
        raise InputError(f"{path}: missing, but the resume point expects {length} bytes")
