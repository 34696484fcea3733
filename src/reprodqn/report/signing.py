"""A bundle's signature: its manifest signed with an OpenSSH key (`ssh-keygen -Y sign`).

Why OpenSSH signatures: they work offline, with a key a researcher already has (the one
git signs commits with, `gpg.format ssh`), and need no account; sigstore needs a network
and an identity provider at signing and at checking, GnuPG a web of trust few readers
keep. The signature covers MANIFEST.sha256, which covers every file, so one signature
vouches for the whole bundle. The signer's public key travels in the bundle (SIGNER.pub,
listed in the manifest) to say which key signed; a reader checks the signature against the
key they trust (`verify BUNDLE --signer KEY`, or `ssh-keygen -Y verify` before installing
anything, REPLICATE.md's first step), since anyone can sign with a key of their own and
write any comment on it: without --signer, the signing key's fingerprint is what to compare
with the one the paper publishes."""

from __future__ import annotations

import base64
import hashlib
import re
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


def sign(manifest: bytes, key: Path, namespace: str = NAMESPACE, option: str = "--sign") -> bytes:
    """The OpenSSH signature of `manifest` (or any bytes) by `key`, in `namespace`."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / workspace.MANIFEST
        path.write_bytes(manifest)
        done = subprocess.run(
            [_ssh_keygen(option), "-Y", "sign", "-q", "-f", str(key), "-n", namespace, str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["ssh-keygen failed"])[-1]
            raise InputError(f"{option} {key}: cannot sign with it ({reason})")
        return path.with_name(path.name + ".sig").read_bytes()


def check(directory: Path, signer: Path | None) -> str:
    """Whether the manifest of the unpacked bundle in `directory` is signed, and by which
    key: against `signer` (a public key or an allowed_signers file) where given; else the
    key that made the signature, by its fingerprint, for the reader to compare with the one
    the paper publishes (SIGNER.pub's comment is the signer's own words: anyone can write
    "author@example")."""
    directory = Path(directory)
    signature = directory / workspace.SIGNATURE
    named = directory / workspace.SIGNER
    if not signature.exists():
        if named.exists():
            raise SignatureError(
                f"{workspace.SIGNER} names a signer, but there is no {workspace.SIGNATURE}: "
                "the signature was removed (bundle --sign ships both)"
            )
        if signer is not None:
            raise SignatureError(
                f"the bundle is unsigned (no {workspace.SIGNATURE}), but --signer asks for "
                "a signature"
            )
        return "unsigned (nobody vouches for it beyond its own hashes)"
    if not named.exists():
        raise SignatureError(f"{workspace.SIGNATURE} without {workspace.SIGNER} (who signed?)")
    shipped = _key_fingerprints(named.read_text())
    if not shipped:
        raise SignatureError(f"{workspace.SIGNER}: no OpenSSH public key in it")
    made_by = _signing_key(directory)
    if made_by is None or made_by not in shipped or not _verifies(directory, named.read_text()):
        raise SignatureError(
            f"{workspace.SIGNATURE}: not a signature of this {workspace.MANIFEST} by the "
            f"key the bundle names ({_describe(named)}): the manifest was rewritten after "
            "signing"
        )
    if signer is None:
        return (
            f"signed by the key {made_by}, as {workspace.SIGNER} says; compare this "
            "fingerprint with the one the paper publishes, or give --signer with the "
            "author's public key (the key's comment proves nothing: anyone can write it)"
        )
    trusted = _key_fingerprints(_signer_text(Path(signer)))
    if not trusted:
        raise InputError(
            f"--signer {signer}: no OpenSSH public key in it (expected 'ssh-ed25519 AAAA...')"
        )
    if made_by not in trusted or not _verifies(directory, _signer_text(Path(signer))):
        raise SignatureError(
            f"{workspace.SIGNATURE}: signed by the key {made_by}, not by the key --signer "
            f"{signer} gives ({', '.join(trusted)}): someone else signed this bundle"
        )
    return f"signed by the key {made_by}, the key --signer gives"


PRIVATE = "-----BEGIN"  # how an OpenSSH (or PEM) private key file begins


def _signer_text(signer: Path) -> str:
    """--signer's file: public keys, or an allowed_signers file; a private key named."""
    if not signer.is_file():
        raise InputError(f"--signer {signer}: no such file (expected an OpenSSH public key)")
    text = signer.read_text(errors="replace")
    if text.lstrip().startswith(PRIVATE):
        raise InputError(
            f"--signer {signer}: a private key; give its public half ({signer.name}.pub), "
            "the key the author publishes"
        )
    return text


def _key_fingerprints(keys: str) -> list[str]:
    """The SHA-256 fingerprints (as `ssh-keygen -l` writes them) of the public keys in
    `keys`: key lines, or an allowed_signers file's."""
    found = []
    for _type, blob in _public_keys(keys):
        try:
            raw = base64.b64decode(blob, validate=True)
        except ValueError:
            continue
        digest = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
        found.append(f"SHA256:{digest}")
    return found


def _public_keys(keys: str) -> list[tuple[str, str]]:
    """(type, base64 blob) of each public key line in `keys`, principals put aside."""
    found = []
    for line in keys.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        start = next((i for i, f in enumerate(fields) if f.startswith(KEY_TYPES)), None)
        if start is not None and start + 1 < len(fields):
            found.append((fields[start], fields[start + 1]))
    return found


def _signing_key(directory: Path) -> str | None:
    """The fingerprint of the key that made the manifest's signature (which the signature
    carries), if it is a signature of this manifest in our namespace; None if not."""
    return signing_key(directory / workspace.MANIFEST, directory / workspace.SIGNATURE, NAMESPACE)


def signing_key(signed: Path, signature: Path, namespace: str) -> str | None:
    """The SHA-256 fingerprint of the key that made `signature` over the file `signed` in
    `namespace` (the signature carries its key), None where it is no such signature."""
    with open(signed, "rb") as data:
        done = subprocess.run(
            [_ssh_keygen("--signer"), "-Y", "check-novalidate", "-n", namespace]
            + ["-s", str(signature)],
            stdin=data,
            capture_output=True,
            text=True,
        )
    matched = re.search(r"key (SHA256:\S+)", done.stdout)
    return matched.group(1) if done.returncode == 0 and matched else None


def _verifies(directory: Path, keys: str) -> bool:
    """Whether the manifest's signature is by one of `keys` (public key lines, or an
    allowed_signers file's, whose principals are put aside: the key is what is trusted)."""
    allowed = [
        f'{PRINCIPAL} namespaces="{NAMESPACE}" {key_type} {blob}'
        for key_type, blob in _public_keys(keys)
    ]
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
