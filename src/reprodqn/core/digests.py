"""Digests: SHA-256 of a JSON value in its canonical form, and of a file's bytes. Every run,
evaluation, params and record digest in reprodqn is made here, one way."""

from __future__ import annotations

import hashlib
import json
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
