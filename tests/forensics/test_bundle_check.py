"""`reprodqn verify BUNDLE`: one unpacked bundle checked on its own, link by link, with no
training. The bundle is the committed smoke study's (reference/smoke/) bundled as a
workspace, with the step-0 checkpoints of two runs rebuilt from their init seeds (the
weights their chains record). Each tamper rewrites the manifest, and the crate too unless
the crate is what it forgets, as a careful co-author would: a later link names it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from reprodqn.config.params import load_params
from reprodqn.core import workspace
from reprodqn.core.digests import sha256_file
from reprodqn.determinism.provenance import fingerprint, fingerprint_fields
from reprodqn.forensics import bundle_check
from reprodqn.report import bundle, html, study_records, writer
from reprodqn.study import new_workspace
from reprodqn.universal.record import universal_record
from tests.helpers import ROOT, cli_env

SMOKE = ROOT / "reference" / "smoke"
SHIPPED = (("deterministic", 0, (0, 1000)), ("initialization", 1, (0,)))  # init-only steps


def write_init_checkpoints(study: Path) -> None:
    """Each SHIPPED run's checkpoints at steps before any update: its init weights."""
    import torch

    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.determinism.checkpoints import cpu_weights, save_weights
    from reprodqn.training.loop import make_run

    params = load_params(study / "params.yaml")
    for group, run, steps in SHIPPED:
        config = resolve_run(params, group, run)
        state = make_run(config, study / "scratch" / group, torch.device("cpu"))
        run_dir = workspace.run_dir(study / "runs", group, run)
        workspace.checkpoints_dir(run_dir).mkdir()
        metadata = {  # as training writes it: evaluation builds the network from it
            "network": config.agent.network,
            "n_actions": str(state.n_actions),
            "history_length": str(config.env.history_length),
            "screen_size": str(config.env.screen_size),
        }
        for step in steps:
            path = workspace.checkpoint_path(run_dir, step)
            save_weights(path, cpu_weights(state.agent.online), metadata)
    shutil.rmtree(study / "scratch", ignore_errors=True)


@pytest.fixture(scope="module")
def smoke_bundle(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bundle")
    study = shutil.copytree(SMOKE, base / "study", ignore=shutil.ignore_patterns(bundle.MANIFEST))
    shutil.copy(ROOT / "CITATION.cff", study / "CITATION.cff")
    write_init_checkpoints(study)
    new_workspace.write_installed(study)  # as every stage of a `reprodqn init` workspace
    out = base / "dist" / "bundle.tar.gz"
    bundle.write(study, out, checkpoints=True)
    with tarfile.open(out) as tar:
        tar.extractall(base / "unpacked", filter="data")
    return base / "unpacked" / bundle.ROOT


@pytest.fixture
def copy(smoke_bundle, tmp_path) -> Path:
    return shutil.copytree(smoke_bundle, tmp_path / bundle.ROOT)


def rewrite_manifest(directory: Path, crate: bool = True) -> None:
    """What a careful tamperer does after an edit: the manifest (and the crate) made to
    match the files."""
    if crate:
        path = directory / "ro-crate-metadata.json"
        document = json.loads(path.read_text())
        for entity in document["@graph"]:
            if "sha256" in entity and (directory / entity["@id"]).is_file():
                entity["sha256"] = sha256_file(directory / entity["@id"])
        path.write_text(json.dumps(document, indent=2))
    names = [
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and p.name not in (bundle.MANIFEST, workspace.SIGNATURE)
    ]
    (directory / bundle.MANIFEST).write_text(
        bundle.manifest_text({name: sha256_file(directory / name) for name in names})
    )


def failed(directory: Path) -> str:
    result = bundle_check.check(directory)
    assert not result["ok"], result
    line = bundle_check.summary(result)
    assert "\n" not in line and line.startswith("verify: BROKEN: ")
    return line


def test_an_untouched_bundle_holds_every_link(smoke_bundle):
    result = bundle_check.check(smoke_bundle)
    assert result["ok"], result["failed"]
    held = "\n".join(result["held"])
    assert "params: params.yaml gives each of the 12 runs the digest" in held
    assert "checkpoints: 3 shipped checkpoints, each with its chain line's weights" in held
    assert "report: 10 files rebuilt from the runs' eval.csv files, identical" in held
    assert result["signature"].startswith("unsigned") and "signature: unsigned" in held


def test_another_runs_checkpoint_swapped_in_is_named(copy):
    theirs = copy / "runs/initialization/1/checkpoints/step-000000000.safetensors"
    ours = copy / "runs/deterministic/0/checkpoints/step-000000000.safetensors"
    shutil.copyfile(theirs, ours)
    rewrite_manifest(copy)
    assert failed(copy) == (
        "verify: BROKEN: checkpoints: runs/deterministic/0/checkpoints/step-000000000."
        "safetensors: weights SHA-256 185f9e49d1d0, but its chain's line for step 0 records "
        "70fb004d5952 (another run's or step's checkpoint, or an edited hashes.jsonl?)"
    )


def test_a_flipped_byte_in_a_checkpoint_is_named(copy):
    path = copy / "runs/deterministic/0/checkpoints/step-000001000.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    rewrite_manifest(copy)
    line = failed(copy)
    assert "checkpoints: runs/deterministic/0/checkpoints/step-000001000.safetensors" in line
    assert "(corrupted)" in line


def test_a_learning_rate_changed_in_params_yaml_is_named(copy):
    path = copy / "params.yaml"
    path.write_text(path.read_text().replace("learning_rate: 0.00025", "learning_rate: 0.0005"))
    rewrite_manifest(copy)
    line = failed(copy)
    assert line.startswith(
        "verify: BROKEN: params: params.yaml gives deterministic/0 config digest "
    )
    recorded = json.loads((copy / "runs/deterministic/0/config.json").read_text())["digest"]
    assert f"runs/deterministic/0/config.json records {recorded[:12]}" in line
    assert "agent.learning_rate (params.yaml 0.0005, config.json 0.00025)" in line


def test_a_seed_edited_in_a_runs_config_is_named(copy):
    path = copy / "runs/minibatch/1/config.json"
    record = json.loads(path.read_text())
    record["config"]["seeds"]["minibatch"] += 1
    path.write_text(json.dumps(record, indent=2))
    rewrite_manifest(copy)
    line = failed(copy)
    assert "params: runs/minibatch/1/config.json: its config gives digest " in line
    assert "(the config edited after the run)" in line and "seeds.minibatch" in line


@pytest.mark.parametrize(
    "name, edit",
    [
        ("reports/table1.csv", lambda text: text.replace(",deterministic,", ",deterministic,9", 1)),
        (
            "evaluations/exploration/1/eval.csv",
            lambda text: text.replace("0,0,0,,0,", "0,0,0,,5,", 1),
        ),
    ],
)
def test_an_edited_table_or_score_is_named_by_the_rebuilt_report(copy, name, edit):
    path = copy / name
    before = path.read_text()
    path.write_text(edit(before))
    assert path.read_text() != before
    rewrite_manifest(copy)
    line = failed(copy)
    assert line.startswith("verify: BROKEN: report: reports/")
    assert "not what the bundle's runs and eval.csv files give" in line


def test_a_stale_crate_is_named(copy):
    path = copy / "reports/table1.md"
    path.write_text(path.read_text() + "\n")
    rewrite_manifest(copy, crate=False)
    assert failed(copy).startswith(
        "verify: BROKEN: crate: reports/table1.md: ro-crate-metadata.json gives SHA-256 "
    )


def test_a_file_against_its_manifest_is_the_first_link(copy):
    (copy / "runs/gpu/0/hashes.jsonl").write_text("{}\n")
    assert failed(copy) == (
        "verify: BROKEN: manifest: 1 file not as MANIFEST.sha256 lists "
        "(first: runs/gpu/0/hashes.jsonl)"
    )


def test_the_command_checks_a_bundle_in_one_line_and_exits_1_when_a_link_fails(copy):
    command = [sys.executable, "-m", "reprodqn.cli", "verify", str(copy)]
    same = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.startswith("verify: consistent in ")
    path = copy / "reports/metrics.json"
    metrics = json.loads(path.read_text())
    metrics["replicable"] = not metrics["replicable"]
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    rewrite_manifest(copy)
    tampered = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert tampered.returncode == 1 and tampered.stderr == ""
    assert tampered.stdout.count("\n") == 1
    assert tampered.stdout.startswith("verify: BROKEN: report: reports/metrics.json")


def test_a_folder_that_is_no_bundle_is_one_line(tmp_path):
    command = [sys.executable, "-m", "reprodqn.cli", "verify", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert result.returncode == 2 and "no MANIFEST.sha256" in result.stderr
    assert result.stderr.count("\n") == 1


def test_params_yaml_of_the_bundle_is_the_studys_own(smoke_bundle):
    """The fixture is the smoke study: a check that passes here passes on a real bundle."""
    shipped = yaml.safe_load((smoke_bundle / "params.yaml").read_text())
    assert shipped == yaml.safe_load((SMOKE / "params.yaml").read_text())
    digest = hashlib.sha256((smoke_bundle / "params.yaml").read_bytes()).hexdigest()
    assert bundle.read_manifest(smoke_bundle)["params.yaml"] == digest


def test_dvc_repro_inside_the_bundle_deletes_nothing_and_says_what_to_run(copy):
    """DVC deletes a stage's outputs before it runs the stage's command: in a bundle, the
    command refused, but results/ had already lost its conditions and SBOM. The bundle's
    pipeline is the workspace form (no src/ paths, which it does not ship) with every
    output kept in place."""
    for name in ("dvc.yaml", ".dvc/config"):
        assert (copy / name).is_file()
    pipeline = (copy / "dvc.yaml").read_text()
    assert "src/" not in pipeline and "{cache: false}" not in pipeline
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    dvc = Path(sys.executable).parent / "dvc"
    done = subprocess.run(
        [str(dvc), "repro"], cwd=copy, capture_output=True, text=True,
        env=cli_env(DVC_NO_ANALYTICS="1"),
    )  # fmt: skip
    assert done.returncode != 0
    refusal = [line for line in done.stderr.splitlines() if line.startswith("reprodqn: error")]
    assert len(refusal) == 1 and "an unpacked bundle, whose files are the reference" in refusal[0]
    assert "Check it with `reprodqn verify .`" in refusal[0]
    after = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file() and ".dvc" not in p.parts}
    assert after == {p: data for p, data in before.items() if ".dvc" not in p.parts}
    assert bundle_check.check(copy)["ok"]


def test_replicate_md_gives_the_time_and_the_steps_a_spot_check_takes(smoke_bundle):
    """The reader's first page: the archive checked with their own tools, then verify
    BUNDLE; the measured training time (the runs' own process records) and the --until
    steps deterministic/0 can be checked at."""
    page = (smoke_bundle / "REPLICATE.md").read_text()
    assert page.split("```sh\n")[1].startswith("sha256sum ARCHIVE")  # before any install
    assert page.split("```sh\n")[3].startswith("reprodqn verify reprodqn-bundle")
    assert re.search(r"Training took \d+ min in all on cpu \(12 runs, the longest ", page)
    assert (
        "STEP is any step from 1 to 3,000; the checkpoints it compares are at 1,000, 2,000, "
        "3,000" in " ".join(page.split())
    )
    assert "It does not check that training computes these chains" in page


def rebuild_report(directory: Path) -> None:
    """What a careful tamperer does after editing a score: the report made from it."""
    params = load_params(directory / "params.yaml")
    study = study_records.load_study(directory, params.study)
    texts = writer.report_texts(study, **writer.report_arguments(params, directory))
    reports = directory / workspace.REPORTS
    texts["report.html"] = html.render(texts["report.md"], reports)
    for name, text in texts.items():
        if (reports / name).exists():
            (reports / name).write_text(text)


def recorded_in(directory: Path, numerics: str) -> None:
    """The bundle's conditions as if its runs had run in `numerics`, every part that says
    them made again to agree (fingerprint, page, report, manifest)."""
    study = workspace.conditions_path(directory)
    paths = [study, *sorted((directory / workspace.RUNS).glob("*/*/conditions.json"))]
    records = {path: json.loads(path.read_text()) for path in paths}
    for record in records.values():
        for key in ("numerics", "numerics_spec"):
            record["numerics"].pop(key, None)
        record["numerics"].update(universal_record(numerics))
    digest = fingerprint(records[study])
    for path, record in records.items():
        path.write_text(json.dumps({**record, "fingerprint": digest}))
    fields = {"fields": fingerprint_fields(records[study]), "fingerprint": digest}
    workspace.fingerprint_path(directory).write_text(json.dumps(fields))
    (directory / workspace.REPLICATE).write_text(bundle.shipped_page(directory))
    rebuild_report(directory)
    rewrite_manifest(directory)


@pytest.mark.parametrize("numerics", ["universal", "standard"])
def test_a_consistent_bundles_verdict_says_where_it_replicates(copy, numerics):
    """A universal bundle: on any x86-64 or aarch64 CPU and any torch, a GPU not yet; a
    standard one: only on the stack its conditions name."""
    recorded_in(copy, numerics)
    result = bundle_check.check(copy)
    assert result["ok"], result["failed"]
    said = {
        "universal": "This bundle's results are in the universal numerics, one chain on every "
        "machine: they replicate bit for bit on any x86-64 or aarch64 CPU and any torch the "
        "package supports; on an NVIDIA GPU not yet, until gpu-check has shown the same "
        "chain there.",
        "standard": "This bundle's results are in the standard numerics: they replicate bit "
        "for bit only on the stack their conditions name: x86_64 CPU at floor",
    }
    lines = bundle_check.summary(result).splitlines()
    assert any(line.startswith(said[numerics]) for line in lines), lines
    page = " ".join((copy / workspace.REPLICATE).read_text().split())
    assert f"**Where it replicates.** {said[numerics]}" in page
    report = " ".join((copy / workspace.REPORTS / "report.md").read_text().split())
    assert said[numerics].replace("This bundle's", "These") in report
