"""A full disk, a quota, an I/O error or a read-only filesystem under a command, as one line.

What could not be written, where, how much room is left, what was kept (the last good resume
point, say) and that the same command resumes from it once the machine is fixed; an I/O error
or a read-only filesystem gets no advice to free space. Partial files are removed by the
writers themselves (temporary names renamed only when complete); this module only words
the failure and checks room before a long run starts.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from reprodqn.core.errors import MachineError

FULL = (errno.ENOSPC, errno.EDQUOT)
BROKEN = {errno.EIO: "an I/O error", errno.EROFS: "a read-only filesystem"}
NEARLY_FULL = 1 << 20  # bytes: a write that failed with no errno on a disk this full was full


def free_bytes(path: Path) -> int | None:
    for candidate in (Path(path), *Path(path).parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(candidate).free
    return None


def _size(count: int | None) -> str:
    if count is None:
        return "unknown"
    return f"{count / 2**30:.2f} GB" if count >= 2**30 else f"{count / 2**20:.1f} MB"


def describe(error: BaseException, what: str, where: Path, kept: str) -> MachineError | None:
    """The one-line MachineError for a storage failure; None for any other error."""
    code = getattr(error, "errno", None)
    free = free_bytes(where)
    # numpy reports a short write ("N requested and M written") with no errno
    full = code in FULL or (
        code is None and isinstance(error, OSError) and free is not None and free < NEARLY_FULL
    )
    if any(
        text in str(error)
        for text in (
            "database or disk is full",  # MLflow's SQLite
            "No space left on device",
            "Disk quota exceeded",
        )
    ):
        full = True
    if full:
        return MachineError(
            f"{what}: no space left under {where} ({_size(free)} free); "
            f"{kept}; free space and rerun the same command to go on from it"
        )
    if code in BROKEN:
        return MachineError(
            f"{what}: {BROKEN[code]} under {where} "
            f"({getattr(error, 'filename', None) or where}); {kept}; "
            "check the device, then rerun the same command"
        )
    return None


@contextlib.contextmanager
def failures(what: str, where: Path, kept) -> Iterator[None]:
    """Turn a storage failure inside the block into a MachineError; `kept()` says what
    survived (called only then)."""
    try:
        yield
    except Exception as error:
        if (
            isinstance(error, MachineError)
            or (found := describe(error, what, where, kept())) is None
        ):
            raise
        raise found from None


def require_room(what: str, where: Path, needed: int, why: str) -> None:
    """Refuse before starting when the disk cannot hold what the run must write."""
    free = free_bytes(where)
    if free is not None and free < needed:
        raise MachineError(
            f"{what}: {why} needs about {_size(needed)} under {where}, "
            f"{_size(free)} free; free space and rerun"
        )
