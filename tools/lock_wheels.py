"""Does requirements.lock install where the image runs it? For every locked package, and for
every Python and platform a supported image base brings, at least one wheel of the locked
version must match that interpreter's tags and carry a hash the lock lists; a version
published as a source archive only must have that archive's hash locked (it builds on any
base). Otherwise the image's `uv pip install --require-hashes` fails there, or compiles a
package from source with whatever compiler the base has.

The registry's answer comes from its JSON simple index (PEP 691), one request per package;
`python -m tools.lock_wheels` prints what is missing, exit 1 if anything is.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class Target:
    """An image base's interpreter: CPython version and the newest glibc it offers."""

    name: str
    python: tuple[int, int]
    glibc: tuple[int, int]

    def tags(self) -> set[Tag]:
        """Every wheel tag this interpreter accepts, on x86_64 Linux."""
        major, minor = self.glibc
        platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
        platforms += [
            "manylinux2014_x86_64",
            "manylinux2010_x86_64",
            "manylinux1_x86_64",
            "linux_x86_64",
        ]
        return set(cpython_tags(self.python, platforms=platforms)) | set(
            compatible_tags(self.python, platforms=platforms)
        )


# the bases the Dockerfile supports, with their own Python and glibc
TARGETS = (
    Target("Debian bookworm (CI's base; Python 3.11, glibc 2.36)", (3, 11), (2, 36)),
    Target("nvidia/cuda:13.0.1-runtime-ubuntu24.04 (Python 3.12, glibc 2.39)", (3, 12), (2, 39)),
)


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    hashes: frozenset[str]


def read_lock(text: str) -> list[Locked]:
    """The `name==version --hash=sha256:...` entries of a pip/uv lock file."""
    entries = []
    for block in re.split(r"\n(?=\S)", text):
        head = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", block)
        if head:
            hashes = frozenset(re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
            entries.append(Locked(canonicalize_name(head[1]), head[2], hashes))
    return entries


def index_files(name: str, index: str = INDEX) -> list[dict]:
    """The registry's files for a project: filename and hashes (PEP 691 JSON)."""
    request = urllib.request.Request(
        f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["files"]


def missing(
    entries: Iterable[Locked],
    targets: Iterable[Target],
    files: Callable[[str], list[dict]] = index_files,
) -> list[str]:
    """One line per (package, target) with no locked wheel that target can install."""
    targets = [(target, target.tags()) for target in targets]
    problems = []
    for entry in entries:
        wheels, source = [], False  # (tags, sha256) of the locked version's wheels
        for file in files(entry.name):
            sha, filename = file["hashes"].get("sha256"), file["filename"]
            if filename.endswith(".whl"):
                try:
                    _, version, _, tags = parse_wheel_filename(filename)
                except InvalidWheelFilename:
                    continue
                if version == Version(entry.version):
                    wheels.append((tags, sha))
            elif filename.endswith(".tar.gz") and sha in entry.hashes:
                try:
                    source |= parse_sdist_filename(filename)[1] == Version(entry.version)
                except InvalidSdistFilename:
                    continue
        if source and not wheels:  # published as source only: it builds on any base
            continue
        for target, accepted in targets:
            if not any(tags & accepted and sha in entry.hashes for tags, sha in wheels):
                problems.append(
                    f"{entry.name}=={entry.version}: no wheel with a locked hash for {target.name}"
                )
    return problems


def main() -> int:
    problems = missing(read_lock(LOCK.read_text()), TARGETS)
    for line in problems:
        print(line)
    print(f"lock_wheels: {len(problems)} missing for {len(TARGETS)} targets", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
