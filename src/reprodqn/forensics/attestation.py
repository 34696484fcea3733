"""Replication attestations: evidence that someone else, on their own machine, got the
same bits. `reprodqn verify --reference BUNDLE --attest KEY` writes an in-toto Statement
(v1) whose subject is the bundle's manifest (which covers every file) and whose predicate
says what was replicated, the verdict and the replicator's machine, signed with
`ssh-keygen -Y sign` (namespace reprodqn-replication): a format others read, and a key a
researcher has. `verify BUNDLE` lists the attestations in the bundle's `attestations/`
(`reprodqn bundle` ships a workspace's) or in one beside it, checks each signature and
subject, and counts the distinct keys and machines: "replicated by N independent
machines". A key vouches for who signed, not for their honesty: the fingerprints are
shown for a reader to compare with the ones the replicators publish."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import atomic_open
from reprodqn.core.digests import canonical_json
from reprodqn.forensics.chains import plural

FOLDER = "attestations"  # in a bundle, or beside it
SUFFIX = ".intoto.json"
STATEMENT = "https://in-toto.io/Statement/v1"
PREDICATE = "https://reprodqn.readthedocs.io/attestations/replication/v1"
NAMESPACE = "reprodqn-replication"  # an attestation's signature is no bundle's signature


class Forged(Exception):
    """An attestation that does not hold: one line naming its file."""


def statement(bundle: Path, result: dict, conditions: dict) -> dict:
    """The in-toto Statement of a replication of `bundle` (verify --reference's `result`)
    on the machine whose `conditions` are given."""
    manifest = Path(bundle) / workspace.MANIFEST
    numerics = conditions.get("numerics") or {}
    return {
        "_type": STATEMENT,
        "subject": [
            {
                "name": workspace.MANIFEST,
                "digest": {"sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()},
            }
        ],
        "predicateType": PREDICATE,
        "predicate": {
            "verdict": "identical" if result.get("identical") else "different",
            "replicated": {
                "runs_compared": result.get("runs_compared"),
                "checkpoints_evaluated_on_both": result.get("checkpoints_evaluated_on_both"),
                "first_difference": result.get("first"),
            },
            "machine": {
                "device_name": conditions.get("device_name"),
                "cpu": (conditions.get("cpu") or {}).get("model"),
                "gpu": (conditions.get("gpu") or {}).get("name"),
                "torch": (conditions.get("packages") or {}).get("torch"),
                "numerics": numerics.get("numerics", "standard"),
                "fingerprint": conditions.get("fingerprint"),
            },
        },
    }


def write(bundle: Path, result: dict, conditions: dict, key: Path, out: Path) -> Path:
    """The signed statement in `out` (FOLDER beside the bundle by default), named by the
    signing key's fingerprint, with its signature beside it (.sig)."""
    from reprodqn.report import signing

    data = (canonical_json(statement(bundle, result, conditions)) + "\n").encode()
    signature = signing.sign(data, key, NAMESPACE, "--attest")
    name = hashlib.sha256(signing.public_key(key)).hexdigest()[:16] + SUFFIX
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / name
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    with atomic_open(path.with_name(path.name + ".sig"), "wb") as handle:
        handle.write(signature)
    return path


def found(bundle: Path) -> list[Path]:
    """The attestations that come with the bundle: in it, then in a folder beside it."""
    bundle = Path(bundle)
    paths = []
    for folder in (bundle / FOLDER, bundle.parent / FOLDER):
        paths += sorted(folder.glob(f"*{SUFFIX}"))
    return paths


def check(bundle: Path) -> str:
    """Each attestation's signature and subject: 'replicated by N independent machines:
    ...' (distinct keys and machines), or none; Forged names the first that does not hold."""
    manifest = hashlib.sha256((Path(bundle) / workspace.MANIFEST).read_bytes()).hexdigest()
    seen: dict[str, str] = {}
    parted = []
    for path in found(bundle):
        key, machine, verdict = _one(path, manifest, Path(bundle))
        if verdict == "identical":
            seen.setdefault(key, machine)
        else:
            parted.append(f"{_name(path, Path(bundle))} ({machine}, key {key})")
    others = f"; parted on {plural(len(parted), 'machine')}: {'; '.join(parted)}" if parted else ""
    if not seen:
        return (
            f"{'none identical' if parted else 'none'} (verify --reference BUNDLE --attest "
            f"KEY writes one after a replication){others}"
        )
    machines = set(seen.values())
    listed = "; ".join(f"{machine}, key {key}" for key, machine in seen.items())
    return (
        f"replicated by {plural(len(machines), 'independent machine')} "
        f"({plural(len(seen), 'key')}): {listed}; compare the keys with the ones the "
        f"replicators publish{others}"
    )


def _one(path: Path, manifest: str, bundle: Path) -> tuple[str, str, str]:
    """One attestation: (the signing key's fingerprint, its machine in words, verdict)."""
    from reprodqn.report import signing

    name = _name(path, bundle)
    signature = path.with_name(path.name + ".sig")
    if not signature.exists():
        raise Forged(f"{name}: unsigned (no {signature.name}): it attests nothing")
    key = signing.signing_key(path, signature, NAMESPACE)
    if key is None:
        raise Forged(f"{name}: not signed by the key its signature carries (edited after?)")
    try:
        document = json.loads(path.read_text())
        digest = document["subject"][0]["digest"]["sha256"]
        predicate = document["predicate"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise Forged(f"{name}: not an in-toto Statement of a replication") from None
    if document.get("_type") != STATEMENT or document.get("predicateType") != PREDICATE:
        raise Forged(f"{name}: not an in-toto Statement of a replication ({PREDICATE})")
    if digest != manifest:
        raise Forged(f"{name}: attests another bundle (manifest SHA-256 {str(digest)[:12]})")
    machine = predicate.get("machine") or {}
    words = ", ".join(
        str(machine.get(k)) for k in ("cpu", "gpu", "torch", "numerics") if machine.get(k)
    )
    return key, words or "a machine it does not describe", str(predicate.get("verdict"))


def _name(path: Path, bundle: Path) -> str:
    try:
        return path.relative_to(bundle.parent).as_posix()
    except ValueError:
        return str(path)


def attest(root: Path, reference: Path, result: dict, key: Path) -> str:
    """`verify --reference BUNDLE --attest KEY`: this replication's statement, signed, in
    FOLDER beside the bundle; what was written, in one line."""
    from reprodqn.core.atomic import read_json
    from reprodqn.core.errors import InputError

    conditions_path = workspace.conditions_path(root)
    if not conditions_path.exists():
        raise InputError(f"--attest: {conditions_path} not found (run the study here first)")
    conditions = read_json(conditions_path, "conditions record")
    path = write(reference, result, conditions, key, Path(reference).parent / FOLDER)
    return (
        f"attested: {path} and its .sig (an in-toto Statement of this replication, signed "
        "with --attest's key); send them to the author, or keep them beside the bundle"
    )
