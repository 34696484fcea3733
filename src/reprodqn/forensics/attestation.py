"""Replication attestations: evidence that someone else, on their own machine, got the
same bits. `reprodqn verify --reference BUNDLE --attest KEY` writes an in-toto Statement
(v1) whose subject is the bundle's manifest (which covers every file) and whose predicate
says what was replicated, the verdict and the replicator's machine, signed with
`ssh-keygen -Y sign` (namespace reprodqn-replication): a format others read, and a key a
researcher has. `verify BUNDLE` lists the attestations in the bundle's `attestations/`
(`reprodqn bundle` ships a workspace's) or in one beside it, checks each signature and
subject, and counts the distinct keys and machines: "replicated by N independent
machines". A key vouches for who signed, not for their honesty: the fingerprints are
shown for a reader to compare with the ones the replicators publish.

`verify --reference BUNDLE --rerun GROUP/RUN --until STEP --attest KEY` signs a claim of
its own kind (SPOT_CHECK): one run retrained to a step, listed apart and never counted as
a replication of the whole study."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import atomic_open
from reprodqn.core.digests import canonical_json
from reprodqn.forensics.chains import plural

FOLDER = "attestations"  # in a bundle, or beside it
# spot-checks in a folder of their own: reprodqn before them read every statement in
# FOLDER as a replication and refused any other kind
SPOT_CHECKS = "spot-checks"
SUFFIX = ".intoto.json"
STATEMENT = "https://in-toto.io/Statement/v1"
PREDICATE = "https://reprodqn.readthedocs.io/attestations/replication/v1"
SPOT_CHECK = "https://reprodqn.readthedocs.io/attestations/spot-check/v1"
NAMESPACE = "reprodqn-replication"  # an attestation's signature is no bundle's signature


class Forged(Exception):
    """An attestation that does not hold: one line naming its file."""


def require_bundle(reference: Path) -> None:
    """An attestation is of a bundle's manifest: --attest without one is refused before any
    replication or retraining runs."""
    from reprodqn.core.errors import InputError

    manifest = Path(reference) / workspace.MANIFEST
    if not manifest.is_file():
        raise InputError(
            f"--attest: {manifest} not found (an attestation is of a bundle's manifest: "
            "attest an unpacked bundle, which `reprodqn bundle` makes)"
        )


def statement(bundle: Path, result: dict, conditions: dict) -> dict:
    """The in-toto Statement of a replication of `bundle` (verify --reference's `result`)
    on the machine whose `conditions` are given."""
    return _statement(
        bundle,
        PREDICATE,
        {
            "verdict": "identical" if result.get("identical") else "different",
            "replicated": {
                "runs_compared": result.get("runs_compared"),
                "checkpoints_evaluated_on_both": result.get("checkpoints_evaluated_on_both"),
                "first_difference": result.get("first"),
            },
            "machine": _machine(conditions),
        },
    )


def spot_check_statement(bundle: Path, result: dict, conditions: dict) -> dict:
    """The in-toto Statement of a spot-check of `bundle` (verify --rerun's `result`): one
    run retrained here from a step to a step, on the machine whose `conditions` are given."""
    played = result.get("evaluation") or {}
    return _statement(
        bundle,
        SPOT_CHECK,
        {
            "verdict": "identical" if result.get("identical") else "different",
            "spot_checked": {
                "run": result["run"],
                "from_step": result["from_step"],
                "until": result["until"],
                "records_compared": result.get("records_compared"),
                "evaluation_episodes_replayed": played.get("episodes", 0),
                "first_difference": result.get("first") or played.get("first"),
            },
            "machine": _machine(conditions),
        },
    )


def _statement(bundle: Path, predicate_type: str, predicate: dict) -> dict:
    manifest = Path(bundle) / workspace.MANIFEST
    return {
        "_type": STATEMENT,
        "subject": [
            {
                "name": workspace.MANIFEST,
                "digest": {"sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()},
            }
        ],
        "predicateType": predicate_type,
        "predicate": predicate,
    }


def _machine(conditions: dict) -> dict:
    numerics = conditions.get("numerics") or {}
    return {
        "device_name": conditions.get("device_name"),
        "cpu": (conditions.get("cpu") or {}).get("model"),
        "gpu": (conditions.get("gpu") or {}).get("name"),
        "torch": (conditions.get("packages") or {}).get("torch"),
        "numerics": numerics.get("numerics", "standard"),
        "fingerprint": conditions.get("fingerprint"),
    }


def write(document: dict, key: Path, out: Path, tail: str = "") -> Path:
    """The signed statement in `out` (FOLDER beside the bundle by default), named by the
    signing key's fingerprint (and `tail`: what a spot-check checked), with its
    signature beside it (.sig)."""
    from reprodqn.report import signing

    data = (canonical_json(document) + "\n").encode()
    signature = signing.sign(data, key, NAMESPACE, "--attest")
    name = hashlib.sha256(signing.public_key(key)).hexdigest()[:16] + tail + SUFFIX
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
        paths += sorted(folder.glob(f"*{SUFFIX}")) + sorted(folder.glob(f"{SPOT_CHECKS}/*{SUFFIX}"))
    return paths


def check(bundle: Path) -> str:
    """Each attestation's signature and subject: 'replicated by N independent machines:
    ...' (distinct keys and machines), or none; spot-checks listed apart, never counted as
    replications; Forged names the first that does not hold."""
    manifest = hashlib.sha256((Path(bundle) / workspace.MANIFEST).read_bytes()).hexdigest()
    seen: dict[str, str] = {}
    parted: list[str] = []
    spot_checked: list[str] = []
    spot_parted: list[str] = []
    for path in found(bundle):
        key, machine, verdict, spot = _one(path, manifest, Path(bundle))
        if spot:
            (spot_checked if verdict == "identical" else spot_parted).append(
                f"{spot} on {machine}, key {key}"
            )
        elif verdict != "identical":
            parted.append(f"{_name(path, Path(bundle))} ({machine}, key {key})")
        else:
            seen.setdefault(key, machine)
    others = f"; parted on {plural(len(parted), 'machine')}: {'; '.join(parted)}" if parted else ""
    if spot_checked:
        others += f"; spot-checked: {'; '.join(spot_checked)}"
    if spot_parted:
        others += f"; spot-checks that parted: {'; '.join(spot_parted)}"
    if not seen:
        return (
            f"{'none identical' if parted else 'none'} (verify --reference BUNDLE --attest "
            f"KEY writes one after a replication){others}"
        )
    machines = set(seen.values())
    named = "; ".join(f"{machine}, key {key}" for key, machine in seen.items())
    return (
        f"replicated by {plural(len(machines), 'independent machine')} "
        f"({plural(len(seen), 'key')}): {named}; compare the keys with the ones the "
        f"replicators publish{others}"
    )


def _one(path: Path, manifest: str, bundle: Path) -> tuple[str, str, str, str]:
    """One attestation: (the signing key's fingerprint, its machine in words, verdict,
    what a spot-check checked in words, or "" for a replication of the whole study)."""
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
        spot = _spot_checked(predicate) if document.get("predicateType") == SPOT_CHECK else ""
    except (ValueError, KeyError, IndexError, TypeError):
        raise Forged(f"{name}: not an in-toto Statement of a replication") from None
    if document.get("_type") != STATEMENT or document.get("predicateType") not in (
        PREDICATE,
        SPOT_CHECK,
    ):
        raise Forged(f"{name}: not an in-toto Statement of a replication ({PREDICATE})")
    if digest != manifest:
        raise Forged(f"{name}: attests another bundle (manifest SHA-256 {str(digest)[:12]})")
    machine = predicate.get("machine") or {}
    words = ", ".join(
        str(machine.get(k)) for k in ("cpu", "gpu", "torch", "numerics") if machine.get(k)
    )
    return key, words or "a machine it does not describe", str(predicate.get("verdict")), spot


def _spot_checked(predicate: dict) -> str:
    """What a spot-check retrained, in words: 'deterministic/0 from step 0 to 60,000'."""
    checked = predicate["spot_checked"]
    return f"{checked['run']} from step {int(checked['from_step']):,} to {int(checked['until']):,}"


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
    document = statement(reference, result, conditions)
    path = write(document, key, Path(reference).parent / FOLDER)
    return _attested(path, "replication")


def attest_spot_check(reference: Path, result: dict, scratch: Path, key: Path) -> str:
    """`verify --reference BUNDLE --rerun GROUP/RUN --until STEP --attest KEY`: the
    spot-check's statement, signed, in FOLDER beside the bundle, on the machine the
    retrained run's conditions.json names; what was written, in one line."""
    from reprodqn.core.atomic import read_json

    conditions = read_json(Path(scratch) / workspace.CONDITIONS, "conditions record")
    document = spot_check_statement(reference, result, conditions)
    tail = f".{result['run'].replace('/', '-')}-to-{result['until']}"
    out = Path(reference).parent / FOLDER / SPOT_CHECKS
    return _attested(write(document, key, out, tail), "spot-check")


def _attested(path: Path, what: str) -> str:
    return (
        f"attested: {path} and its .sig (an in-toto Statement of this {what}, signed "
        "with --attest's key); send them to the author, or keep them beside the bundle"
    )
