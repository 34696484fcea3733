"""A signed bundle (`bundle --sign KEY`): the manifest signed with an OpenSSH key, the
signer's public key shipped; `verify BUNDLE --signer KEY` checks the signature against the
key a reader trusts, so a manifest rewritten by anyone else fails in one line, and an
unsigned bundle is said to be unsigned."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.forensics import bundle_check
from reprodqn.report import bundle
from tests.forensics.test_bundle_check import SMOKE, rewrite_manifest
from tests.helpers import ROOT, cli_env


def keypair(directory: Path, name: str) -> Path:
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@lab", "-f", str(key)],
        check=True,
    )
    return key


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return keypair(directory, "alice"), keypair(directory, "mallory")


@pytest.fixture(scope="module")
def signed(tmp_path_factory, keys) -> Path:
    base = tmp_path_factory.mktemp("signed")
    study = shutil.copytree(SMOKE, base / "study", ignore=shutil.ignore_patterns(bundle.MANIFEST))
    shutil.copy(ROOT / "CITATION.cff", study / "CITATION.cff")
    out = base / "signed.tar.gz"
    bundle.write(study, out, checkpoints=False, sign=keys[0])
    with tarfile.open(out) as tar:
        names = tar.getnames()
        tar.extractall(base / "unpacked", filter="data")
    assert names[-2:] == [
        f"{bundle.ROOT}/{bundle.MANIFEST}",
        f"{bundle.ROOT}/{workspace.SIGNATURE}",
    ]
    return base / "unpacked" / bundle.ROOT


@pytest.fixture
def copy(signed, tmp_path) -> Path:
    return shutil.copytree(signed, tmp_path / bundle.ROOT)


def test_a_signed_bundle_names_its_signer_and_verifies_against_the_trusted_key(signed, keys):
    alice, mallory = keys
    assert (signed / workspace.SIGNER).read_bytes() == alice.with_suffix(".pub").read_bytes()
    assert workspace.SIGNER in bundle.read_manifest(signed)  # who signed is itself signed
    own = bundle_check.check(signed)
    assert own["ok"] and own["signature"].startswith("signed by SHA256:")
    assert "(alice@lab), as the bundle says; give --signer" in own["signature"]
    trusted = bundle_check.check(signed, alice.with_suffix(".pub"))
    assert trusted["ok"] and trusted["signature"].endswith("(alice@lab), the key --signer gives")
    other = bundle_check.check(signed, mallory.with_suffix(".pub"))
    assert not other["ok"] and other["failed"].startswith(
        "signature: MANIFEST.sha256.sig: not a signature of this MANIFEST.sha256 by the key "
        f"--signer {mallory.with_suffix('.pub')} gives (the bundle names SHA256:"
    )


def test_an_allowed_signers_file_is_a_signer_too(signed, keys, tmp_path):
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice@lab {keys[0].with_suffix('.pub').read_text()}")
    assert bundle_check.check(signed, allowed)["ok"]


def test_a_manifest_rewritten_by_someone_else_fails_the_signature(copy, keys):
    alice, mallory = keys
    table = copy / "reports" / "table1.csv"  # the report link would see it too
    table.write_text(
        table.read_text().replace("best_mean,deterministic,", "best_mean,deterministic,9", 1)
    )
    rewrite_manifest(copy)
    result = bundle_check.check(copy, alice.with_suffix(".pub"))
    assert result["failed"].startswith("signature: MANIFEST.sha256.sig: not a signature")
    unsigned_check = bundle_check.check(copy)  # the named key no longer signs it either
    assert "the manifest was rewritten after signing" in unsigned_check["failed"]
    # re-signed with the tamperer's own key, SIGNER.pub replaced: whole as signed, but not
    # by the key the reader trusts
    shutil.copyfile(mallory.with_suffix(".pub"), copy / workspace.SIGNER)
    rewrite_manifest(copy)
    manifest = (copy / bundle.MANIFEST).read_bytes()
    from reprodqn.report import signing

    (copy / workspace.SIGNATURE).write_bytes(signing.sign(manifest, mallory))
    resigned = bundle_check.check(copy)
    assert "(mallory@lab), as the bundle says" in resigned["held"][1], resigned
    command = [sys.executable, "-m", "reprodqn.cli", "verify", str(copy)]
    done = subprocess.run(
        [*command, "--signer", str(alice.with_suffix(".pub"))],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert done.returncode == 1 and done.stdout.count("\n") == 1
    assert done.stdout.startswith("verify: BROKEN: signature: ")


def test_an_unsigned_bundle_is_said_unsigned_and_fails_a_signer(smoke_bundle_unsigned, keys):
    result = bundle_check.check(smoke_bundle_unsigned)
    assert result["ok"] and result["signature"].startswith("unsigned")
    asked = bundle_check.check(smoke_bundle_unsigned, keys[0].with_suffix(".pub"))
    assert asked["failed"] == (
        "signature: the bundle is unsigned (no MANIFEST.sha256.sig), but --signer asks for "
        "a signature"
    )


@pytest.fixture
def smoke_bundle_unsigned(copy) -> Path:
    (copy / workspace.SIGNATURE).unlink()
    (copy / workspace.SIGNER).unlink()
    crate = copy / workspace.CRATE
    document = json.loads(crate.read_text())
    document["@graph"] = [e for e in document["@graph"] if e.get("@id") != workspace.SIGNER]
    crate.write_text(json.dumps(document))
    rewrite_manifest(copy)
    return copy


def test_a_key_that_is_not_there_or_not_a_key_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"--sign .*nowhere: no such key"):
        bundle.write(SMOKE, tmp_path / "x.tar.gz", checkpoints=False, sign=tmp_path / "nowhere")
    (tmp_path / "garbage").write_text("not a key\n")
    with pytest.raises(InputError, match=r"--sign .*garbage: not an OpenSSH private key"):
        bundle.write(SMOKE, tmp_path / "x.tar.gz", checkpoints=False, sign=tmp_path / "garbage")
    assert not (tmp_path / "x.tar.gz").exists()


def test_signer_is_refused_where_no_bundle_is_checked(tmp_path, keys):
    command = [sys.executable, "-m", "reprodqn.cli", "verify", "a", "b", "--signer", str(keys[0])]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=cli_env())
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "verify --signer: only with one unpacked bundle" in done.stderr
