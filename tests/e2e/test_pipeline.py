"""The whole study through `dvc repro`, at a tiny scale, in a temporary copy of the
workspace: the report, the MLflow store, reruns that add nothing, knobs that rerun only
their stages, the bundle and verify."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from reprodqn.config.study import GPU_ON_CPU
from reprodqn.config.study import GROUP_NAMES as GROUPS
from tests.helpers import ROOT, TINY_OVERLAY, cli_env, write_params

TINY_STUDY = {
    **TINY_OVERLAY,
    "study": {"runs_per_group": 2},
    # the paper's method, our draw: evaluation then depends on the start-state pipeline
    "evaluation": {
        "episodes": 3,
        "max_frames": 600,
        "start_sequences": "start_sequences/selected.json",
    },
    "start_states": {"candidates": 24, "top_k": 8, "selected": 3},
    "ranker": {"steps": 400},
}


# the stages re-read at every repro: the machine, and what evaluation plays
ALWAYS_READ = {"conditions", "evaluation_states"}


def env() -> dict:
    e = cli_env(DVC_NO_ANALYTICS="1", REPRODQN_WORKERS="2")
    e.pop("MLFLOW_TRACKING_URI", None)
    return e


def dvc(workspace: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        env=env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def status(workspace: Path) -> dict:
    """Stage -> why it is stale, by stage name (start_sequences/dvc.yaml's names unprefixed)."""
    found = json.loads(dvc(workspace, "status", "--json").stdout)
    return {name.split(":")[-1]: why for name, why in found.items()}


def mentions(output: str, stage: str, what: str) -> bool:
    """Whether DVC's output says `what` of `stage` ('Running stage' or 'Stage ... didn't
    change'), whichever pipeline file it is in."""
    return any(what.format(name) in output for name in (stage, f"start_sequences/dvc.yaml:{stage}"))


def mlflow_runs(workspace: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{workspace / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(f"reprodqn-{workspace.name}")
    return client, client.search_runs([experiment.experiment_id], max_results=500)


def fresh_clone(root: Path, study: dict) -> Path:
    """What a clone holds: the pipelines, the package, the shipped start states; params
    written from params.yaml with `study` as the overlay."""
    root.mkdir()
    for name in ("dvc.yaml", ".dvcignore", "CITATION.cff"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / ".dvc", root / ".dvc", ignore=shutil.ignore_patterns("tmp"))
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "start_sequences").mkdir()
    for name in ("dvc.yaml", "authors.json", "authors-initstates.txt", "authors-LICENSE.md"):
        shutil.copy(ROOT / "start_sequences" / name, root / "start_sequences" / name)
    overlay = root / "tiny.yaml"
    overlay.write_text(yaml.safe_dump(study))
    write_params(
        "--params", str(ROOT / "params.yaml"), "--overlay", str(overlay),
        "--out", str(root / "params.yaml"), env=env(),
    )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = fresh_clone(tmp_path_factory.mktemp("pipeline") / "study", TINY_STUDY)
    first = dvc(root, "repro")
    return root, first


def test_with_the_authors_states_no_start_state_stage_runs(tmp_path):
    """The default: evaluation on the authors' shipped states needs no ranker (a day of CPU
    training at paper scale), so `dvc repro` on a fresh clone plans none of its stages."""
    study = {key: value for key, value in TINY_STUDY.items() if key != "evaluation"}
    root = fresh_clone(tmp_path / "clone", {**study, "evaluation": {"episodes": 3}})
    assert (
        yaml.safe_load((root / "params.yaml").read_text())["evaluation"]["start_sequences"]
        == "start_sequences/authors.json"
    )
    upstream = dvc(root, "dag", "report").stdout
    assert "evaluate" in upstream and "ranker" not in upstream and "select" not in upstream
    to_run = json.loads(dvc(root, "status", "--json", "report", "--with-deps").stdout)
    assert {name.split(":")[-1] for name in to_run} == {
        "conditions",
        "evaluation_states",
        "audit",
        "train",
        "evaluate",
        "report",
    }
    everything = json.loads(dvc(root, "status", "--json").stdout)  # still there to run
    assert {"candidates", "ranker", "select"} <= {name.split(":")[-1] for name in everything}


def test_evaluation_is_stale_when_what_it_plays_changes_with_no_param(tmp_path):
    """Another game left at the default plays its own start_sequences/GAME.json: the
    package's, until `reprodqn select` writes the workspace's. No param and no path in
    dvc.yaml changes then, yet the evaluation is stale: evaluate depends on what is played,
    by content (results/evaluation_states.json, re-read at every repro)."""
    from reprodqn.core import packaged
    from reprodqn.evaluation import start_states

    study = {**TINY_STUDY, "env": {"game": "pong"}, "evaluation": {"episodes": 3}}
    root = fresh_clone(tmp_path / "clone", study)
    dvc(root, "repro", "evaluation_states")
    record = root / "results" / "evaluation_states.json"
    assert json.loads(record.read_text())["from"] == "package"
    (root / "runs").mkdir()
    (root / "evaluations").mkdir()
    dvc(root, "commit", "--force", "evaluate")  # as if evaluated on the package's states
    assert "evaluate" not in status(root)
    theirs = start_states.load(packaged.game_start_sequences("pong"))
    ours = start_states.document(
        theirs["sequences"][::-1], {"stage": "select"}, "pong", tuple(theirs["action_set"])
    )  # what `reprodqn select --set env.game=pong` would write there: other sequences
    (root / "start_sequences" / "pong.json").write_text(json.dumps(ours))
    assert "evaluate" not in status(root)  # not yet re-read
    dvc(root, "repro", "evaluation_states")
    assert json.loads(record.read_text())["from"] == "workspace"
    assert "evaluate" in status(root)


def test_repro_runs_every_stage_and_the_report_is_complete(workspace):
    root, first = workspace
    for stage in (
        "conditions",
        "audit",
        "candidates",
        "ranker",
        "select",
        "train",
        "evaluate",
        "report",
    ):
        assert mentions(first.stdout, stage, "Running stage '{}'")
    assert "study train: 12 jobs" in first.stderr and "12/12 jobs" in first.stderr
    for group in GROUPS:
        for run in (0, 1):
            assert (root / "runs" / group / str(run) / "complete.json").exists()
            assert (root / "evaluations" / group / str(run) / "eval.csv").exists()
    replicability = json.loads((root / "reports" / "replicability.json").read_text())
    assert replicability["replicable"] is True
    assert "gpu group emulates nondeterministic GPU kernels" in replicability["device"]["text"]
    assert "Reduced scale" in (root / "reports" / "report.md").read_text()
    metrics = json.loads(dvc(root, "metrics", "show", "--json").stdout)
    shown = metrics[""]["data"]["reports/metrics.json"]["data"]
    assert shown["replicable"] is True and set(shown["table1"]) == set(GROUPS)
    assert shown["first_divergence_step"]["initialization"]["weights"] == 0
    parting = json.loads((root / "reports" / "metrics.json").read_text())[
        "first_divergence_step"
    ]  # dvc metrics show leaves out "never" (null)
    assert parting["deterministic"] == {"weights": None, "losses": None, "evaluation": None}
    assert parting["initialization"]["weights"] == 0  # different weights from the start
    for group in ("gpu", "exploration", "minibatch", "environment"):  # gpu: sums' order
        # same weights until updates begin (t > 200); the first checkpoint after: 400;
        # the loss chains part in the first process record with updates (step 300)
        assert parting[group]["weights"] == 400 and parting[group]["losses"] == 300
    divergence = json.loads((root / "reports" / "divergence.json").read_text())
    assert divergence["minibatch"]["losses"] == {"step": 300, "updates": [1, 24]}
    report = (root / "reports" / "report.md").read_text()
    assert "| deterministic | 2 | never | never | never |" in report
    assert "| minibatch | 2 | step 400 | step 300 (updates 1–24) |" in report
    assert "the gpu group's runs part through the order of their sums" in report
    assert f"| {GPU_ON_CPU} | 2 | step 400 |" in report
    audit = json.loads((root / "results" / "audit.json").read_text())
    assert audit["global_rng_used"] == [] and "### Nondeterminism audit" in report
    assert audit["exercised"]["network"] == "nips"  # the study's own network
    assert (root / "reports" / "figure_divergence.png").exists()
    # the blind-network probe: every run, the sticky-action group included, and its panel
    for group in ("deterministic", "environment"):
        probe = (root / "evaluations" / group / "0" / "probe.csv").read_text().splitlines()
        assert probe[0] == "step,q_spread,greedy_actions,max_q" and len(probe) == 1 + 4
    assert "## Is the network looking at the screen?" in report
    assert (root / "reports" / "figure_probe.png").exists()
    # DVC tracks every file the report writes: a deleted or edited one reruns the stage
    stage = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["report"]
    declared = {name for out in stage["outs"] + stage["metrics"] for name in out}
    assert {f"reports/{path.name}" for path in (root / "reports").iterdir()} == declared
    plots = json.loads(dvc(root, "plots", "show", "--json").stdout)
    assert "reports/learning_curves.csv" in json.dumps(plots)


def test_mlflow_holds_every_run_metric_and_artifact(workspace):
    from reprodqn.config.params import load_params, resolve_run

    root, _ = workspace
    params = load_params(root / "params.yaml")
    client, runs = mlflow_runs(root)
    by_name = {r.info.run_name: r for r in runs}
    expected = {f"{g}/{r}" for g in GROUPS for r in (0, 1)} | {"study"}
    assert set(by_name) == expected and len(runs) == len(expected)
    experiment = client.get_experiment(runs[0].info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert "reprodqn verify --reference" in experiment.tags["mlflow.note.content"]
    study_id = by_name["study"].info.run_id
    assert by_name["study"].info.status == "FINISHED"
    assert "mlflow.parentRunId" not in by_name["study"].data.tags
    for name in expected - {"study"}:
        run = by_name[name]
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == study_id  # nested under the study
        assert {
            "loss",
            "epsilon",
            "steps_per_second",
            "eval_mean_score",
            "probe_q_spread",
            "probe_greedy_actions",
        } <= set(run.data.metrics)
        assert any(k.startswith("system/") for k in run.data.metrics)
        tags = run.data.tags
        assert tags["reprodqn.group"] == name.split("/")[0] and tags["reprodqn.device"] == "cpu"
        assert len(tags["reprodqn.fingerprint"]) == 64 and "reprodqn.git_commit" in tags
        group, index = name.split("/")
        assert (
            json.loads(tags["reprodqn.seeds"])
            == resolve_run(params, group, int(index)).seeds.model_dump()
        )
        assert run.data.params["agent.network"] == "nips"
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"hashes.jsonl", "eval.csv", "conditions.json", "config.json"} <= artifacts
        study_files = {a.path for a in client.list_artifacts(run.info.run_id, "study")}
        assert {"study/sbom.cdx.json", "study/conditions.json"} <= study_files
        history = client.get_metric_history(run.info.run_id, "eval_mean_score")
        assert sorted(m.step for m in history) == [0, 200, 400, 600]
    report_files = {a.path for a in client.list_artifacts(by_name["study"].info.run_id, "report")}
    assert {
        "report/table1.md",
        "report/figure1.png",
        "report/replicability.json",
        "report/report.html",
    } <= report_files


def test_a_second_repro_reruns_nothing_and_logs_nothing_twice(workspace):
    root, _ = workspace
    assert status(root) == {name: ["always changed"] for name in ALWAYS_READ}
    second = dvc(root, "repro")
    for stage in ("candidates", "ranker", "select", "train", "evaluate", "report"):
        assert mentions(second.stdout, stage, "Stage '{}' didn't change, skipping")
    _, runs = mlflow_runs(root)
    assert len(runs) == 13


@pytest.mark.parametrize(
    "key, value, stale",
    [
        ("evaluation.max_frames", 500, {"evaluate", "report"}),
        ("train.log_every", 50, {"ranker", "train"}),
        ("start_states.selection_seed", 7, {"select"}),
        ("seeds.minibatch", 1, {"ranker", "train"}),
    ],
)
def test_changing_one_knob_reruns_only_what_depends_on_it(workspace, key, value, stale):
    root, _ = workspace
    params_path = root / "params.yaml"
    original = params_path.read_text()
    raw = yaml.safe_load(original)
    section, name = key.split(".")
    raw[section][name] = value
    try:
        params_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        assert set(status(root)) - ALWAYS_READ == stale
    finally:
        params_path.write_text(original)


def test_the_bundle_verifies_and_a_divergence_is_found(workspace, tmp_path):
    root, _ = workspace
    archive = tmp_path / "bundle.tar.gz"
    run = [sys.executable, "-m", "reprodqn.cli"]
    subprocess.run(
        [*run, "bundle", "--out", str(archive)],
        cwd=root,
        check=True,
        env=env(),
        capture_output=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    reference = tmp_path / "unpacked" / "reprodqn-bundle"
    assert (reference / "MANIFEST.sha256").exists() and (reference / "dvc.lock").exists()
    from rocrate.rocrate import ROCrate

    crate = ROCrate(reference)  # a real study's crate: every run's records, the report
    listed = {e.id: e["additionalType"] for e in crate.get_entities() if "File" in e.type}
    assert listed["runs/minibatch/1/hashes.jsonl"] == listed["reports/report.html"] == "output"
    assert listed["start_sequences/selected.json"] == "input"
    assert (reference / "CITATION.cff").exists() and (tmp_path / "CITATION.cff").exists()

    def verify_against() -> subprocess.CompletedProcess:
        command = [*run, "verify", "--reference", str(reference)]
        return subprocess.run(command, cwd=root, capture_output=True, text=True, env=env())

    same = verify_against()
    assert same.returncode == 0 and "identical: 12 runs" in same.stdout

    hashes = reference / "runs" / "minibatch" / "1" / "hashes.jsonl"
    lines = hashes.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["weights_sha256"] = "0" * 64
    lines[2] = json.dumps(entry)
    hashes.write_text("\n".join(lines) + "\n")
    tampered = verify_against()
    assert (
        tampered.returncode == 2 and "not as the bundle's MANIFEST.sha256 lists" in tampered.stderr
    )
    manifest = reference / "MANIFEST.sha256"
    manifest_lines = manifest.read_text().splitlines()
    manifest.unlink()
    refused = verify_against()
    assert refused.returncode == 2 and "a bundle without its MANIFEST.sha256" in refused.stderr
    name = "runs/minibatch/1/hashes.jsonl"  # the manifest made to match the altered chain
    digest = hashlib.sha256(hashes.read_bytes()).hexdigest()
    manifest.write_text(
        "".join(f"{digest}  {name}\n" if x.endswith(name) else x + "\n" for x in manifest_lines)
    )
    different = verify_against()
    assert different.returncode == 1
    assert "first divergence in minibatch/1 at checkpoint step 400 (weights)" in different.stdout
