"""dvc.yaml: each stage depends on exactly the package modules it runs, so an edit reruns
what it affects and nothing else (the import graph is read from the source)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import ROOT
from tools import dvc_deps
from tools.dvc_deps import PIPELINES, STAGE_HANDLERS


def all_stages() -> dict:
    stages = {}
    for path in PIPELINES:
        stages.update(yaml.safe_load(path.read_text())["stages"])
    return stages


def test_every_stage_depends_on_exactly_the_modules_it_runs():
    """`make dvc-deps` writes these lists; a module added to or dropped from a stage's
    import closure makes them stale."""
    stages = all_stages()
    assert set(stages) == set(STAGE_HANDLERS)
    for stage in STAGE_HANDLERS:
        expected = set(dvc_deps.expected_sources(stage))
        declared = {d for d in stages[stage].get("deps", []) if d.startswith("src/")}
        assert declared == expected, (
            f"{stage}: missing {sorted(expected - declared)}, extra {sorted(declared - expected)}"
            "; run make dvc-deps"
        )
    assert "src/reprodqn/dqn/agent.py" in stages["train"]["deps"]  # the closure is followed
    assert "src/reprodqn/forensics/audit.py" not in stages["train"]["deps"]


def test_dvc_deps_rewrites_a_stale_list_and_keeps_every_other_line():
    text = PIPELINES[0].read_text()
    stale = text.replace("      - src/reprodqn/dqn/agent.py\n", "", 1)
    assert stale != text and dvc_deps.rewrite(stale) == text
    assert dvc_deps.rewrite(text) == text


def test_stages_declare_the_params_sections_they_read():
    stages = all_stages()
    assert "study" in stages["train"]["params"] and "train" in stages["train"]["params"]
    assert "evaluation" not in stages["train"]["params"]  # evaluation knobs never retrain
    assert "results/fingerprint.json" in stages["train"]["deps"]
    assert "results/conditions.json" not in stages["train"]["deps"]  # only what changes numbers
    assert stages["train"]["outs"] == [{"runs": {"cache": False, "persist": True}}]
    assert stages["conditions"]["always_changed"] is True
    # what evaluation plays, by content (the file follows env.game), re-read every repro;
    # the named file stays a dep, so the select stage runs first when it is played
    assert "results/evaluation_states.json" in stages["evaluate"]["deps"]
    assert stages["evaluation_states"]["always_changed"] is True
    assert "${evaluation.start_sequences}" in stages["evaluation_states"]["deps"]
    assert Path(ROOT / ".dvcignore").read_text().count("__pycache__") == 1


def test_the_start_state_method_is_a_pipeline_of_its_own_run_at_the_workspace_root():
    """`dvc repro` at the root runs candidates, ranker and select only when evaluation
    depends on their output (tests/e2e/test_pipeline.py shows both choices)."""
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    method = yaml.safe_load(PIPELINES[1].read_text())["stages"]
    assert set(method) == {"candidates", "ranker", "select"} and not set(method) & set(root)
    assert all(stage["wdir"] == ".." for stage in method.values())
    assert "start_sequences/selected.json" in str(method["select"]["outs"])
