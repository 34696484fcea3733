"""A bundle's signature: its manifest signed with an OpenSSH key (`ssh-keygen -Y sign`).

Why OpenSSH signatures: they work offline, with a key a researcher already has (the one
git signs commits with, `gpg.format ssh`), and need no account; sigstore needs a network
and an identity provider at signing and at checking, GnuPG a web of trust few readers
keep. The signature covers MANIFEST.sha256, which covers every file, so one signature
vouches for the whole bundle. The signer's public key travels in the bundle (SIGNER.pub,
listed in the manifest) to say who signed; a reader checks the signature against the key
they trust (`verify BUNDLE --signer KEY`), since anyone can sign with a key of their own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.errors import InputError

NAMESPACE = "reprodqn-bundle"  # a signature for one purpose is no signature for another
PRINCIPAL = "bundle-signer"
KEY_TYPES = ("ssh-", "ecdsa-", "sk-")  # how an OpenSSH public key line begins


class SignatureError(Exception):
    """A signature that does not hold: one line saying why."""


def _ssh_keygen(option: str) -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise InputError(f"{option}: ssh-keygen not found (install OpenSSH's client, 8.2 or later)")
    return found


def public_key(key: Path) -> bytes:
    """The signer's public key line: KEY.pub beside the private key, else derived from it."""
    key = Path(key)
    if not key.is_file():
        raise InputError(f"--sign {key}: no such key (expected an OpenSSH private key)")
    beside = key.with_name(key.name + ".pub")
    if beside.is_file():
        return beside.read_bytes()
    done = subprocess.run(
        [_ssh_keygen("--sign"), "-y", "-f", str(key)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise InputError(f"--sign {key}: not an OpenSSH private key ssh-keygen can read")
    return done.stdout


def sign(manifest: bytes, key: Path) -> bytes:
    """The OpenSSH signature of `manifest` by `key`."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / workspace.MANIFEST
        path.write_bytes(manifest)
        done = subprocess.run(
            [_ssh_keygen("--sign"), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["ssh-keygen failed"])[-1]
            raise InputError(f"--sign {key}: cannot sign with it ({reason})")
        return path.with_name(path.name + ".sig").read_bytes()


def check(directory: Path, signer: Path | None) -> str:
    """Whether the manifest of the unpacked bundle in `directory` is signed, and by whom:
    against `signer` (a public key or an allowed_signers file) where given, else against
    the key the bundle names, which says only that the bundle is whole as signed."""
    directory = Path(directory)
    signature = directory / workspace.SIGNATURE
    named = directory / workspace.SIGNER
    if not signature.exists():
        if signer is not None:
            raise SignatureError(
                f"the bundle is unsigned (no {workspace.SIGNATURE}), but --signer asks for "
                "a signature"
            )
        return "unsigned (nobody vouches for it beyond its own hashes)"
    if not named.exists():
        raise SignatureError(f"{workspace.SIGNATURE} without {workspace.SIGNER} (who signed?)")
    who = _describe(named)
    if signer is None:
        if not _verifies(directory, named.read_text()):
            raise SignatureError(
                f"{workspace.SIGNATURE}: not a signature of this {workspace.MANIFEST} by the "
                f"key the bundle names ({who}): the manifest was rewritten after signing"
            )
        return (
            f"signed by {who}, as the bundle says; give --signer with the key you trust to "
            "check who"
        )
    if not Path(signer).is_file():
        raise InputError(f"--signer {signer}: no such file (expected an OpenSSH public key)")
    if not _verifies(directory, Path(signer).read_text()):
        raise SignatureError(
            f"{workspace.SIGNATURE}: not a signature of this {workspace.MANIFEST} by the key "
            f"--signer {signer} gives (the bundle names {who})"
        )
    return f"signed by {who}, the key --signer gives"


def _verifies(directory: Path, keys: str) -> bool:
    """Whether the manifest's signature is by one of `keys` (public key lines, or an
    allowed_signers file's, whose principals are put aside: the key is what is trusted)."""
    allowed = []
    for line in keys.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        start = next((i for i, f in enumerate(fields) if f.startswith(KEY_TYPES)), None)
        if start is not None and start + 1 < len(fields):
            allowed.append(
                f'{PRINCIPAL} namespaces="{NAMESPACE}" {fields[start]} {fields[start + 1]}'
            )
    if not allowed:
        return False
    with tempfile.TemporaryDirectory() as scratch:
        signers = Path(scratch) / "allowed_signers"
        signers.write_text("\n".join(allowed) + "\n")
        with open(directory / workspace.MANIFEST, "rb") as manifest:
            done = subprocess.run(
                [_ssh_keygen("--signer"), "-Y", "verify", "-f", str(signers), "-I", PRINCIPAL]
                + ["-n", NAMESPACE, "-s", str(directory / workspace.SIGNATURE)],
                stdin=manifest,
                capture_output=True,
            )
    return done.returncode == 0


def _describe(public: Path) -> str:
    """A key as `ssh-keygen -l` gives it: its SHA-256 fingerprint and its comment."""
    done = subprocess.run(
        [_ssh_keygen("--signer"), "-l", "-f", str(public)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SignatureError(f"{workspace.SIGNER}: not an OpenSSH public key")
    fields = done.stdout.split()  # bits, fingerprint, comment..., (type)
    comment = " ".join(fields[2:-1])
    return f"{fields[1]}" + (f" ({comment})" if comment and comment != "no comment" else "")
