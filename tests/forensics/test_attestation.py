"""Replication attestations (issue 71, item 6): `verify --reference BUNDLE --attest KEY`
writes an in-toto Statement of the replication signed with ssh-keygen; `verify BUNDLE`
checks each one beside the bundle or in it and says who replicated it on which machine; a
forged, unsigned or another bundle's attestation is named in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reprodqn.core import workspace
from reprodqn.forensics import attestation, bundle_check
from tests.helpers import ROOT
from tests.report.test_signing import fingerprint, keypair

SMOKE = ROOT / "reference" / "smoke"
IDENTICAL = {"identical": True, "runs_compared": 12, "checkpoints_evaluated_on_both": 48}


@pytest.fixture
def bundle(tmp_path) -> Path:
    """An unpacked bundle as far as attestations see it: its manifest."""
    directory = tmp_path / "reprodqn-bundle"
    directory.mkdir()
    (directory / workspace.MANIFEST).write_text("0" * 64 + "  params.yaml\n")
    return directory


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return keypair(directory, "bob"), keypair(directory, "carol")


def test_an_attestation_is_a_signed_in_toto_statement_of_the_replication(bundle, keys):
    said = attestation.attest(SMOKE, bundle, IDENTICAL, keys[0])
    path = next((bundle.parent / "attestations").glob("*.intoto.json"))
    assert said.startswith(f"attested: {path} and its .sig")
    document = json.loads(path.read_text())
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["subject"][0]["name"] == "MANIFEST.sha256"
    machine = document["predicate"]["machine"]
    assert machine["cpu"] == "AMD EPYC" and machine["numerics"] == "universal"
    assert document["predicate"]["verdict"] == "identical"
    assert attestation.check(bundle) == (
        f"replicated by 1 independent machine (1 key): AMD EPYC, 2.13.0+cpu, universal, key "
        f"{fingerprint(keys[0])}; compare the keys with the ones the replicators publish"
    )


def test_two_keys_on_one_machine_are_one_machine(bundle, keys):
    for key in keys:
        attestation.attest(SMOKE, bundle, IDENTICAL, key)
    assert attestation.check(bundle).startswith("replicated by 1 independent machine (2 keys)")


def test_without_attestations_it_says_how_to_make_one(bundle):
    assert attestation.check(bundle).startswith("none (verify --reference BUNDLE --attest KEY")


def edit(path: Path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    "tamper, expected",
    [
        (
            lambda path: edit(path, lambda d: d["predicate"]["machine"].update(cpu="Intel")),
            "not signed by the key its signature carries (edited after?)",
        ),
        (
            lambda path: path.with_name(path.name + ".sig").unlink(),
            "unsigned (no {name}.sig): it attests nothing",
        ),
    ],
)
def test_a_forged_or_unsigned_attestation_is_named(bundle, keys, tamper, expected):
    attestation.attest(SMOKE, bundle, IDENTICAL, keys[0])
    path = next((bundle.parent / "attestations").glob("*.intoto.json"))
    tamper(path)
    with pytest.raises(attestation.Forged) as raised:
        attestation.check(bundle)
    assert str(raised.value) == f"attestations/{path.name}: " + expected.format(name=path.name)
    broken = pytest.raises(bundle_check.LinkBroken, bundle_check._attestations, bundle)
    assert str(broken.value).startswith("attestations: attestations/")


def test_another_bundles_attestation_is_named(bundle, keys, tmp_path):
    attestation.attest(SMOKE, bundle, IDENTICAL, keys[0])
    (bundle / workspace.MANIFEST).write_text("1" * 64 + "  params.yaml\n")
    with pytest.raises(attestation.Forged, match="attests another bundle"):
        attestation.check(bundle)


def test_a_replication_that_parted_is_listed_apart(bundle, keys):
    attestation.attest(SMOKE, bundle, {**IDENTICAL, "identical": False}, keys[1])
    said = attestation.check(bundle)
    assert said.startswith("none identical (verify --reference BUNDLE --attest KEY")
    assert "; parted on 1 machine: attestations/" in said


SPOT_CHECK = {
    "identical": True,
    "run": "deterministic/0",
    "from_step": 0,
    "until": 200,
    "records_compared": 4,
    "evaluation": {"episodes": 2, "first": None},
}


def spot_check(bundle: Path, result: dict, key: Path, tmp_path: Path) -> str:
    """A spot-check attested, on the machine the smoke reference's run names."""
    scratch = tmp_path / "scratch" / "deterministic" / "0"
    scratch.mkdir(parents=True, exist_ok=True)
    conditions = SMOKE / "runs" / "deterministic" / "0" / workspace.CONDITIONS
    shutil.copy(conditions, scratch / workspace.CONDITIONS)
    return attestation.attest_spot_check(bundle, result, scratch, key)


def test_a_spot_check_is_attested_apart_and_never_counted_as_a_replication(bundle, keys, tmp_path):
    """One run retrained to a step is evidence of its own kind: listed, not counted."""
    said = spot_check(bundle, SPOT_CHECK, keys[0], tmp_path)
    # in a folder of its own: an older reprodqn reads every statement in attestations/
    # as a replication and refuses another kind
    folder = bundle.parent / "attestations" / "spot-checks"
    path = next(folder.glob("*.deterministic-0-to-200.intoto.json"))
    assert said.startswith(f"attested: {path} and its .sig (an in-toto Statement of this spot")
    document = json.loads(path.read_text())
    assert document["predicateType"] == attestation.SPOT_CHECK
    assert document["predicate"]["spot_checked"]["evaluation_episodes_replayed"] == 2
    machine = f"AMD EPYC, 2.13.0+cpu, universal, key {fingerprint(keys[0])}"
    checked = f"spot-checked: deterministic/0 from step 0 to 200 on {machine}"
    assert attestation.check(bundle) == (
        f"none (verify --reference BUNDLE --attest KEY writes one after a replication); {checked}"
    )
    attestation.attest(SMOKE, bundle, IDENTICAL, keys[1])  # a whole replication beside it
    said = attestation.check(bundle)
    assert said.startswith("replicated by 1 independent machine (1 key): ")
    assert said.endswith(f"replicators publish; {checked}")
    spot_check(bundle, {**SPOT_CHECK, "identical": False}, keys[0], tmp_path)  # redone: parted
    said = attestation.check(bundle)
    assert "spot-checked" not in said and "parted on" not in said  # not a replication's
    assert said.endswith("; spot-checks that parted: " + checked.split(": ", 1)[1])
    spot_check(bundle, {**SPOT_CHECK, "until": 400}, keys[0], tmp_path)  # further: kept apart
    assert len(list(folder.glob("*.intoto.json"))) == 2
    edit(path, lambda d: d["predicate"]["spot_checked"].update(until=300000))
    with pytest.raises(attestation.Forged, match="not signed by the key its signature carries"):
        attestation.check(bundle)


def test_attest_without_a_manifest_is_refused_before_any_work(tmp_path):
    from reprodqn.core.errors import InputError

    with pytest.raises(InputError, match=r"--attest: .*MANIFEST.sha256 not found"):
        attestation.require_bundle(tmp_path)


def test_the_bundle_ships_a_workspaces_attestations(tmp_path, keys):
    """`reprodqn bundle` includes the attestations received (in the manifest: signed too)."""
    from reprodqn.report import bundle

    study = shutil.copytree(SMOKE, tmp_path / "study", ignore=shutil.ignore_patterns("MANIFEST*"))
    (study / "attestations").mkdir()
    (study / "attestations" / "x.intoto.json").write_text("{}")
    (study / "attestations" / "x.intoto.json.sig").write_text("sig")
    (study / "attestations" / "spot-checks").mkdir()
    (study / "attestations" / "spot-checks" / "y.intoto.json").write_text("{}")
    names = {f.as_posix() for f in bundle.collect(study, checkpoints=False)}
    assert {"attestations/x.intoto.json", "attestations/x.intoto.json.sig"} <= names
    assert "attestations/spot-checks/y.intoto.json" in names
