"""`verify BUNDLE` cross-checks what a bundle says twice (issue 71): with the manifest and
crate rewritten after an edit, as a careful tamperer would, each edit below passed as
"consistent"; now the link that compares the two parts names it in one line. And every
file of the archive is the manifest's, not only those where verify reads."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
import yaml

from reprodqn.core import workspace
from reprodqn.forensics import bundle_check
from tests.forensics import test_bundle_check as base
from tests.forensics.test_bundle_check import failed, rewrite_manifest

smoke_bundle, copy = base.smoke_bundle, base.copy  # its fixtures: the smoke study's bundle


def the_wheel(directory: Path) -> Path:
    return next((directory / "wheels").glob("*.whl"))


def rewrite_wheel(directory: Path, entry: str, edit) -> None:
    """The wheel with one entry edited and its RECORD made to match, as a tamperer would."""
    path = the_wheel(directory)
    with zipfile.ZipFile(path) as archive:
        entries = {i.filename: archive.read(i) for i in archive.infolist()}
    entries[entry] = edit(entries[entry])
    record = next(name for name in entries if name.endswith(".dist-info/RECORD"))
    lines = []
    for name, data in entries.items():
        if name != record:
            digest = hashlib.sha256(data).digest()
            encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            lines.append(f"{name},sha256={encoded},{len(data)}\n")
    entries[record] = ("".join(lines) + f"{record},,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())


CHECKER = "reprodqn/forensics/bundle_check.py"


def loosen(data: bytes) -> bytes:
    """The one-line change that makes the checker say consistent to anything."""
    return data.replace(b'return {"ok": False,', b'return {"ok": True,')


def test_a_wheel_that_is_not_code_is_named(copy):
    rewrite_wheel(copy, CHECKER, loosen)
    rewrite_manifest(copy)
    assert failed(copy) == (
        f"verify: BROKEN: code: code/{CHECKER}: not the wheel's (wheels/{the_wheel(copy).name})"
    )


def test_a_wheel_entry_against_its_record_is_named(copy):
    path = the_wheel(copy)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("reprodqn/extra.py", b"print('hello')\n")
    rewrite_manifest(copy)
    assert failed(copy) == (
        f"verify: BROKEN: code: wheels/{path.name}: reprodqn/extra.py is not as its RECORD lists it"
    )


def test_dvc_lock_and_params_yaml_disagreeing_on_the_learning_rate_is_named(copy):
    path = copy / "dvc.lock"
    text = path.read_text()
    path.write_text(text.replace("learning_rate: 0.00025", "learning_rate: 0.0005"))
    assert path.read_text() != text
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: pipeline: dvc.lock's stage audit ran with agent.learning_rate = "
        "0.0005, params.yaml gives 0.00025 (params.yaml edited after the study ran?)"
    )


def edit_json(path: Path, edit) -> None:
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record, indent=2))


def test_a_runs_conditions_naming_another_cpu_is_named(copy):
    edit_json(
        copy / "runs/exploration/1/conditions.json",
        lambda r: r["cpu"].update(model="Intel Xeon"),
    )
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: conditions: runs/exploration/1/conditions.json gives cpu.model "
        "'Intel Xeon', results/conditions.json 'AMD EPYC'"
    )


def test_a_fingerprint_that_is_not_its_fields_hash_is_named(copy):
    edit_json(copy / "results/fingerprint.json", lambda r: r["fields"].update(torch_threads=4))
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: conditions: results/fingerprint.json: its fingerprint is not its "
        "fields' hash"
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "numpy==1.26.0",
            "requirements.lock pins numpy==1.26.0, results/conditions.json records 2.4.6",
        ),
        (  # the header names the torch build the runs recorded (+cpu)
            "# torch==2.13.0+cu128: the build the study ran, installed first from its own index:",
            "requirements.lock names torch 2.13.0+cu128, results/conditions.json records "
            "2.13.0+cpu",
        ),
        (
            "--index-url https://pypi.example.org/simple",
            "requirements.lock: line 3 is not a pin 'name==version' ('--index-url "
            "https://pypi.example.org/simple'): it installs from elsewhere",
        ),
    ],
)
def test_a_lock_that_disagrees_with_the_conditions_or_installs_elsewhere_is_named(
    copy, line, expected
):
    path = copy / "requirements.lock"
    lines = [x for x in path.read_text().splitlines() if not x.startswith("numpy==")]
    lines.insert(2, line)
    path.write_text("\n".join(lines) + "\n")
    rewrite_manifest(copy)
    assert failed(copy) == f"verify: BROKEN: conditions: {expected}"


def test_an_install_line_pointing_elsewhere_in_replicate_md_is_named(copy):
    path = copy / "REPLICATE.md"
    text = path.read_text()
    path.write_text(  # pip install [--require-hashes] -r ...: hashed unless bundled offline
        text.replace(
            " -r reprodqn-bundle/requirements.lock",
            " -r https://example.org/requirements.txt",
        )
    )
    assert path.read_text() != text
    rewrite_manifest(copy)
    line = failed(copy)
    assert line.startswith(
        "verify: BROKEN: page: REPLICATE.md: not the page the bundle's files give (line "
    )
    assert "-r https://example.org/requirements.txt'" in line
    assert "-r reprodqn-bundle/requirements.lock'" in line


def test_a_deleted_complete_json_is_named(copy):
    name = "runs/deterministic/1/complete.json"
    (copy / name).unlink()
    edit_json(  # the crate forgets it too, as the manifest does
        copy / workspace.CRATE,
        lambda crate: crate.__setitem__(
            "@graph", [e for e in crate["@graph"] if e.get("@id") != name]
        ),
    )
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: runs: runs/deterministic/1: its chain reaches the last step (3,000) "
        "but complete.json is missing (removed?)"
    )


def test_a_process_record_whose_chain_is_not_the_chains_is_named(copy):
    path = copy / "runs/minibatch/0/process.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    at = next(r for r in records if r["step"] == 2000)
    at["loss_chain_sha256"] = "0" * 64
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: runs: runs/minibatch/0/process.jsonl: step 2000's loss_chain_sha256 "
        "is not its hashes.jsonl line's"
    )


def test_an_edited_loss_value_is_said_to_need_rerun(smoke_bundle):
    """A loss value is not in any chain line: verify BUNDLE says which check sees it."""
    held = "\n".join(bundle_check.check(smoke_bundle)["held"])
    assert "(a loss value itself: verify --rerun)" in held


@pytest.mark.parametrize(
    "name", ["extra.sh", "code/reprodqn/extra.py", "wheels/other.whl", "reports/note.md"]
)
def test_a_file_outside_the_manifest_anywhere_is_named(copy, name):
    (copy / name).parent.mkdir(parents=True, exist_ok=True)
    (copy / name).write_text("echo hello\n")
    assert failed(copy) == (
        f"verify: BROKEN: manifest: 1 file not as MANIFEST.sha256 lists (first: {name} "
        "(not in the manifest))"
    )


def test_python_caches_and_dvcs_scratch_are_no_ones_claim(copy):
    for name in ("code/reprodqn/__pycache__/x.pyc", ".dvc/tmp/lock"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text("")
    assert bundle_check.check(copy)["ok"]


def test_the_verdict_says_what_needs_a_replication_and_who_checked(smoke_bundle, copy, monkeypatch):
    from reprodqn.forensics.bundle_cross import wheel_entries
    from reprodqn.report import wheel

    entries = wheel_entries(smoke_bundle)[1]  # this checker, were it the bundle's wheel
    own = {name: data for name, data in entries.items() if name.startswith("reprodqn/")}
    monkeypatch.setattr(wheel, "package_tree", lambda: own)
    result = bundle_check.check(smoke_bundle)
    checker, needs = result["unvouched"]
    assert checker.startswith("checked by the bundle's own wheel (reprodqn ")
    assert "REPLICATE.md, step 1" in checker
    monkeypatch.setattr(wheel, "package_tree", lambda: {**own, "reprodqn/x.py": b""})
    outside = bundle_check.check(smoke_bundle)["unvouched"][0]
    assert outside.endswith("from outside the bundle (its files are not the bundle's wheel's)")
    assert needs.startswith("needs a replication: the scores are what the shipped checkpoints")
    for path in copy.glob("runs/*/*/checkpoints"):
        for checkpoint in path.iterdir():
            checkpoint.unlink()
        path.rmdir()
    assert bundle_check._needs_replication(copy).startswith(
        "needs a replication: no checkpoints are shipped, so a score (eval.csv) and the "
        "chains are checked only by training again"
    )


def test_a_report_line_that_differs_late_is_shown_where_it_differs(copy):
    path = copy / "reports/table1.md"
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if len(line) > 70)
    edited = lines[index][:-3] + ("0" if lines[index][-3] != "0" else "1") + lines[index][-2:]
    lines[index] = edited
    path.write_text("\n".join(lines) + "\n")
    rewrite_manifest(copy)
    line = failed(copy)
    shipped, rebuilt = line.split("shipped ")[1].split(", rebuilt ")
    assert shipped != rebuilt.rstrip(")")


def test_replicate_md_regenerates_from_an_untouched_bundle(smoke_bundle):
    held = "\n".join(bundle_check.check(smoke_bundle)["held"])
    assert "page: REPLICATE.md is the page the bundle's files give" in held
    assert yaml.safe_load((smoke_bundle / "CITATION.cff").read_text())["title"]
    assert workspace.REPLICATE in (smoke_bundle / "MANIFEST.sha256").read_text()
