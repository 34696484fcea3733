"""A bundle's signature: placeholder until signing lands."""

from __future__ import annotations

from pathlib import Path


class SignatureError(Exception):
    pass


def check(directory: Path, signer: Path | None) -> str:
    if signer is not None:
        raise SignatureError("the bundle is unsigned")
    return "unsigned"
