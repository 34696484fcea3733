"""The bundle's metadata: CITATION.cff valid against the Citation File Format 1.2.0 schema,
and an RO-Crate that the `rocrate` library loads, whose every file is in the bundle with
the SHA-256 its manifest gives, each named as workflow, input, output, software or
conditions."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from reprodqn.core.errors import InputError
from reprodqn.report import bundle, citation
from tests.helpers import ROOT

STUDY_FILES = {
    "dvc.yaml": "stages: {}\n",
    "params.yaml": "study: {}\n",
    "pyproject.toml": "[project]\nname = 'reprodqn'\n",  # with src/reprodqn: a checkout
    "src/reprodqn/__init__.py": '"""x"""\n',
    "start_sequences/authors.json": '{"sequences": []}\n',
    "runs/deterministic/0/hashes.jsonl": '{"step": 0}\n',
    "runs/deterministic/0/conditions.json": "{}\n",
    "evaluations/deterministic/0/eval.csv": "step,episode\n",
    "reports/report.html": "<html></html>\n",
    "results/conditions.json": "{}\n",
    "results/sbom.cdx.json": "{}\n",
    "results/audit.json": "{}\n",
    "resume-points/deterministic/0/latest.json": "{}\n",
}


def bundled(tmp_path, files: dict[str, str]) -> tuple[Path, Path]:
    """A small study workspace of these files (not a git checkout), bundled and unpacked."""
    root = tmp_path / "study"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    shutil.copy(ROOT / "CITATION.cff", root / "CITATION.cff")
    out = tmp_path / "dist" / "bundle.tar.gz"
    bundle.write(root, out, checkpoints=False)
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    return tmp_path / "unpacked" / bundle.ROOT, out


@pytest.fixture
def unpacked(tmp_path):
    return bundled(tmp_path, STUDY_FILES)


def manifest(directory: Path) -> dict[str, str]:
    lines = (directory / "MANIFEST.sha256").read_text().splitlines()
    return {name: digest for digest, _, name in (line.partition("  ") for line in lines)}


def test_the_crate_lists_every_file_with_the_manifests_hash(unpacked):
    from rocrate.rocrate import ROCrate

    directory, out = unpacked
    assert not any(name.startswith("code/") for name in manifest(directory))  # src/ is it
    crate = ROCrate(directory)  # the library's own reader
    files = {e.id: e for e in crate.get_entities() if "File" in e.type}
    listed = manifest(directory)
    assert set(files) == set(listed) - {"ro-crate-metadata.json"}
    for name, entity in files.items():
        assert (directory / name).is_file(), name
        assert entity["sha256"] == listed[name], name
    roles = {name: entity["additionalType"] for name, entity in files.items()}
    assert (
        roles["dvc.yaml"] == roles["params.yaml"] == roles["src/reprodqn/__init__.py"] == "workflow"
    )
    assert roles["start_sequences/authors.json"] == "input"
    assert roles["runs/deterministic/0/hashes.jsonl"] == roles["reports/report.html"] == "output"
    assert roles["results/sbom.cdx.json"] == "software"
    assert roles["results/conditions.json"] == roles["results/audit.json"] == "conditions"
    assert roles["resume-points/deterministic/0/latest.json"] == "output"
    assert crate.mainEntity.id == "dvc.yaml" and "ComputationalWorkflow" in crate.mainEntity.type
    study = crate.get("#study")
    inputs = {e.id for e in study["object"]}
    assert "#breakout-rom" in inputs and "start_sequences/authors.json" in inputs
    assert len(crate.get("#breakout-rom")["sha256"]) == 64
    assert {e.id for e in study["result"]} >= {
        "reports/report.html",
        "evaluations/deterministic/0/eval.csv",
    }
    # the same files sit beside the archive, for an upload to an archive such as Zenodo
    for name in bundle.METADATA:
        assert (out.parent / name).read_bytes() == (directory / name).read_bytes()


def test_citation_is_valid_cff_with_the_commit_date(unpacked):
    directory, _ = unpacked
    doc = yaml.safe_load((directory / "CITATION.cff").read_text())
    citation.validate_citation(doc, "CITATION.cff")  # the CFF 1.2.0 schema
    assert doc["cff-version"] == "1.2.0" and doc["date-released"]
    assert doc["references"][0]["authors"][0]["family-names"] == "Nagarajan"
    crate = json.loads((directory / "ro-crate-metadata.json").read_text())
    root = next(e for e in crate["@graph"] if e["@id"] == "./")
    assert root["datePublished"] == doc["date-released"]  # never the clock's time


def test_a_workspace_without_a_checkout_ships_the_installed_package_as_a_wheel(tmp_path):
    """`reprodqn init`'s workspace has no src/: the code that made its results is the
    installed package, which the archive holds as a wheel that installs from the archive
    alone, with the lock, and unpacked under code/, package data included (its presets
    were missing: a checkout's data/ links to folders)."""
    import importlib.metadata
    import subprocess
    import sys

    from reprodqn.report import wheel

    workspace_files = {k: v for k, v in STUDY_FILES.items() if not k.startswith("src/")}
    unpacked, _ = bundled(tmp_path, workspace_files)
    version = importlib.metadata.version("reprodqn")
    shipped = unpacked / "wheels" / f"reprodqn-{version}-py3-none-any.whl"
    assert shipped.is_file() and (unpacked / "requirements.lock").is_file()
    lock_lines = (unpacked / "requirements.lock").read_text().splitlines()
    assert not any(line.startswith("torch==") for line in lock_lines)  # its own pin first
    target = tmp_path / "installed"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(target), str(shipped)],
        check=True,
    )  # fmt: skip
    code = unpacked / "code"
    unpacked_files = {
        p.relative_to(code).as_posix(): p.read_bytes() for p in code.rglob("*") if p.is_file()
    }
    for name in ("reprodqn/exact.py", "reprodqn/data/presets/laptop.yaml", "reprodqn/py.typed"):
        assert (target / name).read_bytes() == unpacked_files[name]
    assert set(wheel.package_tree()) <= set(unpacked_files)
    info = f"reprodqn-{version}.dist-info"
    assert {f"{info}/METADATA", f"{info}/RECORD", f"{info}/WHEEL"} <= set(unpacked_files)
    found = subprocess.run(
        [sys.executable, "-c", "import reprodqn, importlib.metadata as m; "
         "print(reprodqn.__file__, m.version('reprodqn'))"],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert found.stdout.split() == [str(target / "reprodqn" / "__init__.py"), version]
    assert f"{bundle.INSTALLED_CODE}/exact.py" in manifest(unpacked)
    assert bundle.check_manifest(unpacked) == []
    crate = json.loads((unpacked / "ro-crate-metadata.json").read_text())
    assert any(e["@id"] == f"wheels/{shipped.name}" for e in crate["@graph"])


def test_the_same_workspace_gives_the_same_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    root = tmp_path / "study"
    for name, text in STUDY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    shutil.copy(ROOT / "CITATION.cff", root / "CITATION.cff")
    first = bundle.write(root, tmp_path / "a" / "b.tar.gz", checkpoints=False)
    second = bundle.write(root, tmp_path / "b" / "b.tar.gz", checkpoints=False)
    assert first["sha256"] == second["sha256"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"authors": []}, r"authors: \[\] should be non-empty"),
        ({"cff-version": "1.1.0"}, r"cff-version: '1.1.0' does not match"),
        ({"title": None}, r"title: None is not of type 'string'"),
    ],
)
def test_an_invalid_citation_is_one_line_naming_the_field(tmp_path, change, message):
    doc = {**yaml.safe_load((ROOT / "CITATION.cff").read_text()), **change}
    (tmp_path / "CITATION.cff").write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=message) as error:
        citation.citation(tmp_path, None, "2026-01-01")
    assert "\n" not in str(error.value) and "CITATION.cff" in str(error.value)


def test_a_reference_copy_holds_the_results_not_the_code_and_keeps_its_readme(tmp_path):
    root = tmp_path / "study"
    for name, text in {
        **STUDY_FILES,
        "dvc.lock": "schema: '2.0'\n",
        "runs/deterministic/0/checkpoints/step-000000000.safetensors": "w",
        "resume-points/deterministic/0/latest.json": "{}\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    out = tmp_path / "reference" / "laptop"
    out.mkdir(parents=True)
    (out / "README.md").write_text("how this reference was made\n")
    (out / "stale.txt").write_text("from an older reference\n")
    info = bundle.write_reference(root, out)
    shipped = set(manifest(out))
    assert shipped == {
        "dvc.yaml",
        "dvc.lock",
        "params.yaml",
        "runs/deterministic/0/hashes.jsonl",
        "runs/deterministic/0/conditions.json",
        "reports/report.html",
        "evaluations/deterministic/0/eval.csv",
        "results/conditions.json",
        "results/sbom.cdx.json",
        "results/audit.json",
    }
    assert info["files"] == len(shipped) and bundle.check_manifest(out) == []
    assert (out / "README.md").read_text() == "how this reference was made\n"
    assert not (out / "stale.txt").exists() and not (out / "src").exists()
    assert not out.with_name("laptop.tmp").exists() and not out.with_name("laptop.old").exists()
    (out / "runs/deterministic/0/hashes.jsonl").write_text('{"step": 1}\n')
    assert bundle.check_manifest(out) == ["runs/deterministic/0/hashes.jsonl"]


def test_a_scratch_workspace_with_a_copy_of_src_ships_the_installed_package(tmp_path):
    """make smoke's workspace holds a copy of src/ (for its stages' dependencies) but is no
    checkout: its bundle held that copy, whose data links resolved into the workspace (the
    smoke params as the package's); the code that ran is the installed package."""
    files = {k: v for k, v in STUDY_FILES.items() if k != "pyproject.toml"}
    unpacked, _ = bundled(tmp_path, files)
    listed = manifest(unpacked)
    assert not any(name.startswith("src/") for name in listed)
    assert f"{bundle.INSTALLED_CODE}/exact.py" in listed


def test_the_bundle_says_how_to_replicate_it_and_its_archive_carries_its_sha256(tmp_path):
    import hashlib

    unpacked, out = bundled(tmp_path, STUDY_FILES)
    page = (unpacked / "REPLICATE.md").read_text()
    assert page.split("```sh\n")[1].startswith("sha256sum ARCHIVE")  # first: own tools
    assert "sha256sum --quiet -c MANIFEST.sha256" in page
    hashed = "--hash=" in (unpacked / "requirements.lock").read_text()  # offline: by version
    install = "pip install --require-hashes" if hashed else "pip install"
    assert f"{install} -r reprodqn-bundle/requirements.lock" in page
    wheel = next((unpacked / "wheels").glob("*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f'echo "reprodqn-bundle/wheels/{wheel.name} --hash=sha256:{digest}"' in page
    assert "pip install --no-deps --require-hashes -r wheel.txt" in page
    assert "reprodqn verify reprodqn-bundle" in page
    assert "reprodqn verify --reference ../reprodqn-bundle" in page
    assert "REPLICATE.md" in manifest(unpacked)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert out.with_name(out.name + ".sha256").read_text() == f"{digest}  {out.name}\n"
    with pytest.raises(InputError, match=r"--out .*dist: a directory; give the archive's path"):
        bundle.write(tmp_path / "study", out.parent, checkpoints=False)


def test_a_manifest_that_is_not_sha256sums_or_misses_files_is_named(tmp_path):
    """A blank line is skipped; a malformed line, or one naming a path outside the bundle,
    is one line naming it (it was a traceback, or a read outside); a file the manifest does
    not list is named; a bundle whose manifest is gone is refused, not read unchecked."""
    from reprodqn.forensics import verify

    unpacked, _ = bundled(tmp_path, STUDY_FILES)
    path = unpacked / "MANIFEST.sha256"
    text = path.read_text()
    path.write_text(text + "\n")
    assert bundle.check_manifest(unpacked) == []
    for left in (".vscode/settings.json", "build/lib/reprodqn/x.py", "src/reprodqn.egg-info/x"):
        (unpacked / left).parent.mkdir(parents=True, exist_ok=True)  # an editor's, pip's
        (unpacked / left).write_text("{}")  # build in place: not where verify reads
    assert bundle.check_manifest(unpacked) == []
    (unpacked / "runs/deterministic/0/extra.json").write_text("{}")
    assert bundle.check_manifest(unpacked) == [
        "runs/deterministic/0/extra.json (not in the manifest)"
    ]
    for line in ("0" * 64 + " one-space.txt", "0" * 64 + "  ../../etc/hostname", "garbage"):
        path.write_text(text + line + "\n")
        with pytest.raises(InputError, match=rf"line {text.count(chr(10)) + 1} is not 'SHA-256  "):
            bundle.check_manifest(unpacked)
    path.unlink()
    with pytest.raises(InputError, match="a bundle without its MANIFEST.sha256"):
        verify.check_bundle(unpacked)


def test_a_workspace_bundled_in_place_is_still_a_reference_and_a_workspace(tmp_path):
    """`bundle --out x.tar.gz` in a workspace's root writes the crate beside the archive,
    there: the workspace is not taken for an unpacked bundle that lost its manifest."""
    from reprodqn.core import workspace
    from reprodqn.forensics import verify

    root = tmp_path / "study"
    for name, text in STUDY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    shutil.copy(ROOT / "CITATION.cff", root / "CITATION.cff")
    bundle.write(root, root / "study.tar.gz", checkpoints=False)
    assert (root / workspace.CRATE).exists() and not workspace.is_unpacked_bundle(root)
    verify.check_bundle(root)  # no error: a workspace, compared as one


def test_commands_that_write_results_refuse_to_run_inside_an_unpacked_bundle(
    tmp_path, monkeypatch, capsys
):
    """Its runs are the reference: `study train` there found them finished and seemed to
    replicate them, and on another machine would have retrained them in place."""
    from reprodqn.cli.main import main

    unpacked, _ = bundled(tmp_path, STUDY_FILES)
    monkeypatch.chdir(unpacked)
    assert main(["study", "train"]) == 2
    error = capsys.readouterr().err
    assert "an unpacked bundle, whose files are the reference; `reprodqn study`" in error
    assert error.count("\n") == 1 and bundle.check_manifest(unpacked) == []
    # the bundle pipeline's evaluation_states stage writes its record with --out
    assert main(["start-states", "which", "--out", "results/evaluation_states.json"]) == 2
    assert "whose files are the reference; `reprodqn start-states`" in capsys.readouterr().err
    assert not (unpacked / "results" / "evaluation_states.json").exists()
