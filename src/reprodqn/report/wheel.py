"""The package a bundle carries, as a wheel: the installed reprodqn's files (its code and
its data, as it ran) with its metadata, zipped the same way every time, so a reader
installs the code that made the results from the archive alone (`pip install` of the
wheel; its dependencies from the lock beside it), and the archive stays reproducible.

Made from the installed files, not built: a build needs the build backend and, isolated,
a network; the installed files are what ran. The lock: a checkout's requirements.lock as it
is; elsewhere, what the study needs to run, as installed, with hashes (report.lock)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import os
import zipfile
from importlib.resources import files
from pathlib import Path

from reprodqn.core import packaged
from reprodqn.report import lock

WHEEL_DIR = "wheels"  # the wheel itself, in the bundle
CODE_DIR = "code"  # the wheel's contents, unpacked, for a reader to browse
TAG = "py3-none-any"
STAMP = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold: every entry the same


def package_tree() -> dict[str, bytes]:
    """Every file of the installed package by its path in a wheel (reprodqn/...), links
    followed (a checkout's data/ links to its own files, which a wheel copies)."""
    root = Path(str(files("reprodqn")))
    found = {}
    for parent, children, names in os.walk(root, followlinks=True):
        children[:] = sorted(c for c in children if c != "__pycache__")
        for name in names:
            if not name.endswith((".pyc", ".pyo")):
                path = Path(parent) / name
                found[f"reprodqn/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return dict(sorted(found.items()))


def wheel_name() -> str:
    """The file name of the wheel a bundle made here carries."""
    return f"reprodqn-{packaged.version()}-{TAG}.whl"


def wheel_files() -> tuple[str, dict[str, bytes]]:
    """The wheel's file name and its entries by name, RECORD last."""
    version = packaged.version()
    info = f"reprodqn-{version}.dist-info"
    entries = package_tree()
    entries[f"{info}/METADATA"] = _metadata_file("METADATA", _minimal_metadata(version))
    entries[f"{info}/entry_points.txt"] = _metadata_file(
        "entry_points.txt", "[console_scripts]\nreprodqn = reprodqn.cli.main:main\n"
    )
    entries[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: reprodqn bundle\nRoot-Is-Purelib: true\nTag: {TAG}\n"
    ).encode()
    record = "".join(
        f"{name},sha256={_digest(data)},{len(data)}\n" for name, data in entries.items()
    )
    entries[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    return wheel_name(), entries


def wheel_bytes(entries: dict[str, bytes]) -> bytes:
    """The wheel: a zip of `entries` in their order, each with the same time and mode."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            member = zipfile.ZipInfo(name, date_time=STAMP)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, data)
    return buffer.getvalue()


def bundled(root: Path, lock_shipped: bool) -> dict[str, bytes]:
    """What a bundle adds for the code: the wheel, its contents under code/, and the lock
    where the bundle does not already ship one."""
    name, entries = wheel_files()
    added = {f"{WHEEL_DIR}/{name}": wheel_bytes(entries)}
    added.update({f"{CODE_DIR}/{entry}": data for entry, data in entries.items()})
    if not lock_shipped:
        added[lock.NAME] = lock.runtime_lock().encode()
    return added


def _metadata_file(name: str, fallback: str) -> bytes:
    """The installed distribution's own metadata file, else a minimal one (a copy of the
    source that was never installed)."""
    try:
        text = importlib.metadata.distribution(packaged.DISTRIBUTION).read_text(name)
    except importlib.metadata.PackageNotFoundError:
        text = None
    return (text or fallback).encode()


def _minimal_metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: reprodqn\nVersion: {version}\n"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
