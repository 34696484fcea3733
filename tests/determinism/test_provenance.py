"""Conditions record the machine; the fingerprint tracks only what changes numbers; the SBOM
is reproducible; a run trained under other conditions is never resumed or reused."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import shutil
import subprocess
import sys

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from reprodqn.determinism import provenance, sbom
from reprodqn.study import launch
from tests.helpers import PARAMS, TINY, cli_env, train_tiny


@pytest.fixture(scope="module")
def conditions():
    # the standard numerics' conditions: what changes their numbers is this file's subject
    return provenance.collect(load_params(PARAMS, ["compute.numerics=standard"]).compute)


def test_conditions_record_what_the_paper_lists(conditions):
    assert conditions["device"] in ("cpu", "cuda:0")
    cpu = conditions["cpu"]
    assert cpu["model"] and cpu["logical_cores"] >= 1 and cpu["architecture"]
    assert set(cpu["isa_flags"]) <= set(cpu["all_flags"])
    assert conditions["memory_bytes"] > 0 and conditions["os"]["kernel"]
    gpu = conditions["gpu"]
    assert "present" in gpu and (gpu["present"] or "no CUDA device" in gpu["note"])
    for name in ("torch", "numpy", "ale-py", "opencv-python-headless"):
        assert conditions["packages"][name], name
    # gymnasium is recorded when present; the package drives ALEInterface directly (atari.py)
    try:
        gymnasium = importlib.metadata.version("gymnasium")
    except importlib.metadata.PackageNotFoundError:
        gymnasium = None
    assert conditions["packages"]["gymnasium"] == gymnasium
    assert conditions["python"]["version"].startswith("3.11")
    assert conditions["numerics"]["torch_threads"] == 1
    assert "CUBLAS_WORKSPACE_CONFIG" in conditions["numerics"]["environment"]
    assert {"inside_container", "engine", "image_digest", "torch_build"} <= set(
        conditions["container"]
    )
    assert "commit" in conditions["bundle"]
    assert conditions["fingerprint"] == provenance.fingerprint(conditions)


def test_a_workspace_outside_the_checkout_records_the_running_code_commit(tmp_path, monkeypatch):
    """`make laptop LAPTOP=~/elsewhere` runs the checkout's editable install in a directory
    git knows nothing of: the conditions still name the code's commit and its date."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "c", "--date", "2020-02-03T00:00:00Z"],
        check=True,
        env={"GIT_COMMITTER_DATE": "2020-02-03T00:00:00Z", "PATH": "/usr/bin:/bin"},
    )
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.setattr(provenance, "PACKAGE_DIR", checkout)
    assert provenance.git_info(workspace) == {
        "commit": head.strip(),
        "dirty": False,
        "date": "2020-02-03",
    }
    monkeypatch.setattr(provenance, "PACKAGE_DIR", tmp_path / "site-packages")
    assert provenance.git_info(workspace) == {"commit": None, "note": "not a git checkout"}


@pytest.mark.parametrize(
    "path, value, changes",
    [
        (("packages", "torch"), "2.14.0", True),
        (("packages", "ale-py"), "0.13.0", True),
        (("device_name",), "NVIDIA GeForce GTX 1080", True),
        (("gpu", "driver"), "384.111", True),
        (("numerics", "cpu_isa"), "native", True),
        (("numerics", "torch_threads"), 4, True),
        (("numerics", "environment", "ONEDNN_MAX_CPU_ISA"), "AVX2", True),
        (("python", "version"), "3.11.9", True),
        (("packages", "mlflow"), "9.9.9", False),
        (("memory_bytes",), 1, False),
        (("os", "kernel"), "5.15", False),
        (("bundle", "commit"), "0" * 40, False),
        (("cpu", "model"), "another CPU with the same instruction sets", False),
        (("container", "image_digest"), "sha256:" + "1" * 64, False),
        (("container", "torch_build"), "cuda", False),  # the torch package version says it
    ],
)
def test_fingerprint_tracks_only_conditions_that_change_numbers(conditions, path, value, changes):
    other = copy.deepcopy(conditions)
    node = other
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert (provenance.fingerprint(other) != conditions["fingerprint"]) == changes
    assert ".".join(path) in provenance.differences(other, conditions)


def test_a_pinned_floor_replaces_the_machines_own_instruction_sets(conditions):
    """Pinned: two machines at or above the floor share a fingerprint; native: they don't."""
    assert conditions["numerics"]["cpu_isa"] == "portable"
    older = copy.deepcopy(conditions)
    older["cpu"]["isa_flags"] = ["avx", "avx2", "fma", "sse4_1", "sse4_2"]
    older["cpu"]["torch_cpu_capability"] = "AVX2"
    assert provenance.fingerprint(older) == conditions["fingerprint"]
    newer = copy.deepcopy(conditions)
    for record in (older, newer):
        record["numerics"]["cpu_isa"] = "native"
    assert provenance.fingerprint(older) != provenance.fingerprint(newer)


@pytest.fixture(scope="module")
def stage_and_job(tmp_path_factory):
    """The conditions stage run twice, as dvc runs it (the user's shell, without
    CUBLAS_WORKSPACE_CONFIG) and as the launcher runs a study job (the environment it
    states): two separate writes of the records, each with its own empty SBOM cache, so
    both SBOMs are made, not one copied."""
    root = tmp_path_factory.mktemp("conditions")
    shell = cli_env() | {"XDG_CACHE_HOME": str(root / "cache-stage")}
    shell.pop("CUBLAS_WORKSPACE_CONFIG", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "conditions",
            "--params",
            str(PARAMS),
            "--out-dir",
            str(root / "stage"),
        ],
        check=True,
        env=shell,
        capture_output=True,
    )
    job = launch.Job(
        "conditions/0",
        ["conditions", "--params", str(PARAMS), "--out-dir", str(root / "job")],
        launch.job_environment(threads=1) | {"XDG_CACHE_HOME": str(root / "cache-job")},
    )
    launch.check(launch.LocalExecutor(1).run([job], "test"), "test")
    return root / "stage", root / "job"


def test_conditions_stage_writes_records_and_a_reproducible_sbom(stage_and_job):
    a, b = stage_and_job
    assert (a / "sbom.cdx.json").read_bytes() == (b / "sbom.cdx.json").read_bytes()
    assert (a / "fingerprint.json").read_bytes() == (b / "fingerprint.json").read_bytes()
    document = json.loads((a / "sbom.cdx.json").read_text())
    assert document["bomFormat"] == "CycloneDX" and "serialNumber" not in document
    assert "timestamp" not in document["metadata"]
    versions = {c["name"]: c.get("version") for c in document["components"]}
    assert versions["torch"].startswith("2.13.0") and versions["numpy"] and versions["mlflow"]
    assert "file:" not in (a / "sbom.cdx.json").read_text()
    assert not any(c["bom-ref"].startswith("BomRef.") for c in document["components"])
    # cyclonedx is told not to check its output (36 s): the document written is checked here
    schema = SchemaVersion.from_version(document["specVersion"])
    assert JsonStrictValidator(schema).validate_str(json.dumps(document)) is None
    for cache in ("cache-stage", "cache-job"):  # each made its own, and keeps it
        kept = list((a.parent / cache / "reprodqn" / "sbom").glob("*.json"))
        assert len(kept) == 1 and json.loads(kept[0].read_text()) == document
    record = json.loads((a / "fingerprint.json").read_text())
    assert record["fingerprint"] == json.loads((a / "conditions.json").read_text())["fingerprint"]


def test_the_conditions_stage_fingerprints_what_a_study_job_computes_under(stage_and_job):
    """dvc runs the conditions stage in the user's shell, the launcher each job in the
    environment it states: both must fingerprint the same conditions, or the study never
    sees a finished run as finished and launches it again."""
    stage, in_job = (json.loads((d / "fingerprint.json").read_text()) for d in stage_and_job)
    assert provenance.differences(stage["fields"], in_job["fields"]) == []
    assert stage["fingerprint"] == in_job["fingerprint"]


def test_a_run_from_other_conditions_is_refused_then_retrained(tmp_path):
    params = load_params(PARAMS, [*TINY, "train.steps=200"])
    run_dir = tmp_path / "run"
    chain = train_tiny(params, run_dir)
    config_path = run_dir / "config.json"
    record = json.loads(config_path.read_text())
    record["fingerprint"] = "f" * 64  # as if trained on another machine
    config_path.write_text(json.dumps(record))
    backup = tmp_path / "backup"
    shutil.copytree(run_dir, backup)
    with pytest.raises(InputError, match="different experimental conditions"):
        train_tiny(params, run_dir)
    assert (run_dir / "hashes.jsonl").read_text() == (backup / "hashes.jsonl").read_text()
    from reprodqn.config.params import resolve_run
    from reprodqn.training.loop import train

    for _ in train(resolve_run(params, "deterministic", 0), run_dir, restart=True):
        pass
    assert json.loads(config_path.read_text())["fingerprint"] != "f" * 64
    assert chain == [
        json.loads(line) for line in (run_dir / "hashes.jsonl").read_text().splitlines()
    ]


def test_an_sbom_baked_into_the_environment_is_read_and_not_made_again(tmp_path, monkeypatch):
    """The image bakes its SBOM at build time: a study's conditions stage in it reads that
    one and never runs cyclonedx, and another environment never reads it."""
    baked_doc = {"bomFormat": "CycloneDX", "components": [{"name": "baked"}]}
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sbom, "sbom_document", lambda: baked_doc)
    assert sbom.bake_sbom().is_relative_to(tmp_path / "env" / "share")

    def cyclonedx():
        raise AssertionError("cyclonedx ran")

    monkeypatch.setattr(sbom, "sbom_document", cyclonedx)
    assert sbom.write_sbom(tmp_path / "sbom.cdx.json") == baked_doc
    assert json.loads((tmp_path / "sbom.cdx.json").read_text()) == baked_doc
    assert not (tmp_path / "cache").exists()  # nothing made, so nothing cached
    monkeypatch.setattr(sys, "executable", str(tmp_path / "another" / "python"))
    with pytest.raises(AssertionError, match="cyclonedx ran"):
        sbom.write_sbom(tmp_path / "another.cdx.json")


def test_differing_values_names_each_path_with_both_values_as_they_are():
    from reprodqn.determinism.provenance import differing_values

    long_a, long_b = "x" * 60 + "a", "x" * 60 + "b"
    ours = {"optim.lr": 0.1, "seed": None, "same": 1, "nested": {"k": long_a}}
    theirs = {"optim.lr": 0.2, "same": 1, "nested": {"k": long_b}, "extra": [1]}
    extra, nested, lr, seed = differing_values(ours, theirs)
    assert extra == "extra (ours absent, reference [1])"
    assert lr == "optim.lr (ours 0.1, reference 0.2)"  # a key with a dot is one key
    assert seed == "seed (ours null, reference absent)"
    shown = nested.removeprefix("nested.k (ours ").removesuffix(")").split(", reference ")
    assert len(shown) == 2 and shown[0] != shown[1]  # told apart past the cut
    assert all(len(text) <= 50 and "sha256" in text for text in shown)
    assert differing_values({"a": 1}, {"a": 1}) == []


def test_the_cpu_is_named_by_vendor_family_model_and_stepping_outside_the_fingerprint(
    conditions, monkeypatch
):
    """conditions.json named the CPU "AMD EPYC" alone; an older record without these fields
    differs from a new one in nothing, and the fingerprint never covers them."""
    from reprodqn.determinism import isa

    info = isa.cpuinfo()
    cpu = conditions["cpu"]
    for field, key in (
        ("vendor", "vendor_id"),
        ("family", "cpu family"),
        ("model_number", "model"),
    ):
        assert cpu[field] == info.get(key)
    assert cpu["stepping"] == info.get("stepping") and cpu["all_flags"]
    older = copy.deepcopy(conditions)
    for field in ("vendor", "family", "model_number", "stepping"):
        del older["cpu"][field]
    assert provenance.differences(conditions, older) == []
    assert provenance.fingerprint(older) == conditions["fingerprint"]
    other = copy.deepcopy(conditions)
    other["cpu"]["stepping"] = "99"
    assert provenance.differences(conditions, other) == ["cpu.stepping"]
