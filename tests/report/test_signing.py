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
    print_alice = fingerprint(alice)
    assert own["ok"] and own["signature"] == (
        f"signed by the key {print_alice}, as SIGNER.pub says; compare this fingerprint with "
        "the one the paper publishes, or give --signer with the author's public key (the "
        "key's comment proves nothing: anyone can write it)"
    )
    trusted = bundle_check.check(signed, alice.with_suffix(".pub"))
    assert trusted["ok"] and trusted["signature"] == (
        f"signed by the key {print_alice}, the key --signer gives"
    )
    other = bundle_check.check(signed, mallory.with_suffix(".pub"))
    assert not other["ok"] and other["failed"] == (
        f"signature: MANIFEST.sha256.sig: signed by the key {print_alice}, not by the key "
        f"--signer {mallory.with_suffix('.pub')} gives ({fingerprint(mallory)}): someone else "
        "signed this bundle"
    )


def fingerprint(key: Path) -> str:
    """The key's SHA-256 fingerprint, as ssh-keygen -l gives it."""
    done = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(key.with_suffix(".pub"))], capture_output=True, text=True
    )
    return done.stdout.split()[1]


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
    resigned = bundle_check.check(copy)  # whole as signed: the fingerprint says by whom
    assert (
        f"signed by the key {fingerprint(mallory)}, as SIGNER.pub says; compare"
        in (resigned["held"][1])
    )
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
    # its page as an unsigned bundle's (a signed one's says how to check the signature)
    (copy / "REPLICATE.md").write_text(bundle.shipped_page(copy))
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


def test_a_comment_on_the_key_is_not_shown_as_who_signed(copy, keys, tmp_path):
    """A tamperer's key with the author's comment on it: the fingerprint is what is shown."""
    alice, mallory = keys
    forged = tmp_path / "forged.pub"
    kind, blob, _ = mallory.with_suffix(".pub").read_text().split()
    forged.write_text(f"{kind} {blob} alice@lab\n")
    shutil.copyfile(forged, copy / workspace.SIGNER)
    rewrite_manifest(copy)
    from reprodqn.report import signing

    (copy / workspace.SIGNATURE).write_bytes(
        signing.sign((copy / bundle.MANIFEST).read_bytes(), mallory)
    )
    result = bundle_check.check(copy)
    assert "alice@lab" not in result["signature"]
    assert result["signature"].startswith(f"signed by the key {fingerprint(mallory)},")


def test_a_signature_by_another_key_than_signer_pub_is_named(copy, keys):
    alice, mallory = keys
    from reprodqn.report import signing

    (copy / workspace.SIGNATURE).write_bytes(
        signing.sign((copy / bundle.MANIFEST).read_bytes(), mallory)
    )
    result = bundle_check.check(copy)
    assert result["failed"].startswith(
        "signature: MANIFEST.sha256.sig: not a signature of this MANIFEST.sha256 by the key "
        "the bundle names (SHA256:"
    )


def test_a_removed_signature_with_signer_pub_left_is_named(copy):
    (copy / workspace.SIGNATURE).unlink()
    result = bundle_check.check(copy)
    assert result["failed"] == (
        "signature: SIGNER.pub names a signer, but there is no MANIFEST.sha256.sig: the "
        "signature was removed (bundle --sign ships both)"
    )


def test_a_private_key_given_as_signer_is_named_as_such(signed, keys):
    alice, _ = keys
    command = [sys.executable, "-m", "reprodqn.cli", "verify", str(signed), "--signer", str(alice)]
    done = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert f"--signer {alice}: a private key; give its public half (alice.pub)" in done.stderr


def test_a_signed_bundles_page_says_so_and_its_first_step_catches_a_replaced_wheel(
    signed, keys, tmp_path
):
    """REPLICATE.md's first step, run as written with tools the reader has (sha256sum,
    ssh-keygen) and the author's key from outside the bundle, passes on the bundle; on one
    whose wheel was replaced (the manifest rewritten to match, the crate too) it fails
    before anything from the archive is installed."""
    from tests.e2e.test_replicate import shell_blocks
    from tests.forensics.test_bundle_cross import CHECKER, loosen, rewrite_wheel

    alice, _ = keys
    page = (signed / "REPLICATE.md").read_text()
    assert "The bundle is signed: `MANIFEST.sha256.sig` signs the manifest." in page
    files, signature = shell_blocks(page)[:2]
    assert signature[-2].startswith("-s MANIFEST.sha256.sig")  # the line it continues
    folder = tmp_path / "reader"
    shutil.copytree(signed, folder / bundle.ROOT)
    shutil.copyfile(alice.with_suffix(".pub"), folder / "AUTHOR_KEY.pub")
    step = "set -e\n" + "\n".join(files[1:] + signature)  # after sha256sum ARCHIVE
    done = subprocess.run(["bash", "-c", step], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'Good "reprodqn-bundle" signature for author' in done.stdout + done.stderr
    rewrite_wheel(folder / bundle.ROOT, CHECKER, loosen)
    (folder / bundle.ROOT / "code" / CHECKER).write_bytes(
        loosen((folder / bundle.ROOT / "code" / CHECKER).read_bytes())
    )
    rewrite_manifest(folder / bundle.ROOT)
    caught = subprocess.run(["bash", "-c", step], cwd=folder, capture_output=True, text=True)
    assert caught.returncode != 0
    assert "Could not verify signature" in caught.stdout + caught.stderr
