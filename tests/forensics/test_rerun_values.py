"""`verify --rerun` compares what it recomputes by value: every field of the process
records (a loss, epsilon, the episode scores; not only the loss chain), and the evaluation
episodes it replays from its last retrained checkpoint against the shipped eval.csv. A
loss edited from 0.0042 to 9.0042, or an edited score, once passed as "match"."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from reprodqn.config.params import load_params
from reprodqn.core import workspace
from reprodqn.evaluation.stage import evaluate_stage
from reprodqn.forensics import rerun, verify
from tests.helpers import PARAMS, TINY, train_tiny

EVALUATION = ["evaluation.episodes=3", "evaluation.max_frames=600"]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A workspace with params.yaml, a finished deterministic/0 and its evaluation."""
    root = tmp_path_factory.mktemp("shipped")
    params = load_params(PARAMS, [*TINY, *EVALUATION])
    (root / "params.yaml").write_text(yaml.safe_dump(params.model_dump(mode="json")))
    train_tiny(params, workspace.run_dir(root / workspace.RUNS, "deterministic", 0))
    evaluate_stage(
        params, "deterministic", 0, root / workspace.RUNS, root / workspace.EVALUATIONS, None, 1
    )
    return root, params


def run_dir(root):
    return workspace.run_dir(root / workspace.RUNS, "deterministic", 0)


def spot_check(root, params, scratch, episodes=3):
    config = rerun.shipped_config(root, "deterministic", 0, PARAMS)
    return verify.spot_check(root, config, 400, scratch, params.evaluation, episodes)


def test_a_process_record_is_compared_by_value_not_only_its_chain(shipped, tmp_path):
    root, _ = shipped
    copy = shutil.copytree(run_dir(root), tmp_path / "reference")
    records = workspace.read_process(copy)
    edited = next(r for r in records if r["loss"] is not None)
    edited["loss"] += 9  # the loss chain left as it was
    (copy / workspace.PROCESS).write_text("".join(json.dumps(r) + "\n" for r in records))
    result = rerun.compare_prefix(copy, run_dir(root), 600)
    assert result["first"] == {"file": "process.jsonl", "step": edited["step"], "fields": ["loss"]}
    same = {"ours": "portable", "reference": "portable"}
    said = verify.spot_check_summary(
        {**result, "run": "deterministic/0", "from_step": 0, "cpu_isa": same}
        | {"numeric_conditions_differing": []}
    )
    assert verify.NEXT not in said  # an edit, not an op that computed otherwise
    assert said.split("\n")[1].startswith(verify.EDITED[:60])
    timing = workspace.read_process(run_dir(root))
    for record in timing:
        record["steps_per_second"] = 1.0  # another machine's speed: not a difference
    (copy / workspace.PROCESS).write_text("".join(json.dumps(r) + "\n" for r in timing))
    assert rerun.compare_prefix(copy, run_dir(root), 600)["identical"]


def test_the_evaluation_rows_replayed_match_or_are_named(shipped, tmp_path):
    root, params = shipped
    result = spot_check(root, params, tmp_path / "rerun")
    assert result["identical"], result
    assert result["evaluation"] == {
        "step": 400, "steps": [(0, 3), (400, 3)], "episodes": 6, "first": None
    }  # fmt: skip
    assert "evaluation episodes replayed (3 of step 0 and 3 of step 400) give eval.csv's" in (
        verify.spot_check_summary(result)
    )
    copy = shutil.copytree(root, tmp_path / "copy")
    eval_dir = workspace.eval_dir(copy / workspace.EVALUATIONS, "deterministic", 0)
    rows = (eval_dir / workspace.EVAL_CSV).read_text().splitlines()
    index = next(i for i, row in enumerate(rows) if row.startswith("400,1,"))
    fields = rows[index].split(",")
    fields[4] = str(int(fields[4]) + 7)  # the score of step 400's episode 1
    rows[index] = ",".join(fields)
    (eval_dir / workspace.EVAL_CSV).write_text("\n".join(rows) + "\n")
    parted = spot_check(copy, params, tmp_path / "rerun2")
    assert not parted["identical"] and parted["evaluation"]["first"]["episode"] == 1
    line = verify.spot_check_summary(parted).splitlines()[0]
    assert line.startswith(
        "verify: DIFFERENT: deterministic/0 retrained here has the reference's weights and "
        "losses, but its checkpoint at step 400 plays episode 1 otherwise than the "
        "reference's eval.csv (score ours "
    )
    none = spot_check(copy, params, tmp_path / "rerun3", episodes=0)
    assert none["identical"] and none["evaluation"] is None


def test_a_score_forged_at_step_0_is_named_by_the_spot_check(shipped, tmp_path):
    """--rerun --until STEP replayed only STEP's episodes: a score edited at step 0 (the
    report's too) passed; step 0's checkpoint is played again as well."""
    root, params = shipped
    copy = shutil.copytree(root, tmp_path / "copy")
    eval_dir = workspace.eval_dir(copy / workspace.EVALUATIONS, "deterministic", 0)
    rows = (eval_dir / workspace.EVAL_CSV).read_text().splitlines()
    index = next(i for i, row in enumerate(rows) if row.startswith("0,0,"))
    fields = rows[index].split(",")
    fields[4] = str(int(fields[4]) + 7)  # the score of step 0's episode 0
    rows[index] = ",".join(fields)
    (eval_dir / workspace.EVAL_CSV).write_text("\n".join(rows) + "\n")
    parted = spot_check(copy, params, tmp_path / "rerun")
    assert not parted["identical"] and parted["evaluation"]["step"] == 0
    line = verify.spot_check_summary(parted).splitlines()[0]
    assert "but its checkpoint at step 0 plays episode 0 otherwise than the reference's" in line


def test_a_second_rerun_into_the_same_scratch_is_refused(shipped, tmp_path):
    """Two --rerun at once in one folder: the second deleted the first's run while it
    trained, and both said DIFFERENT; the second is now refused in one line."""
    from reprodqn.core import run_lock
    from reprodqn.core.errors import InputError

    root, params = shipped
    with (
        run_lock.hold(tmp_path / ".rerun.lock", "verify --rerun deterministic/0"),
        pytest.raises(InputError, match=r"rerun.lock is being written by pid \d+"),
    ):
        spot_check(root, params, tmp_path / "rerun")
    assert not (tmp_path / "rerun").exists()
