"""`reprodqn verify --reference`: a workspace against another copy of the study, on small
synthetic workspaces whose answers are known."""

from __future__ import annotations

import json
import shutil

import pytest

from reprodqn.config.study import GroupConfig, StudyConfig
from reprodqn.core.errors import InputError
from reprodqn.forensics import verify


def make_workspace(root, scores_by_run):
    """A minimal workspace on disk: hashes, eval.csv, conditions."""
    for (group, index), (chain, score) in scores_by_run.items():
        run_dir = root / "runs" / group / str(index)
        run_dir.mkdir(parents=True)
        (run_dir / "hashes.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        "step": s,
                        "weights_sha256": f"{chain}{s}",
                        "loss_chain_sha256": "x",
                        "updates": 0,
                    }
                )
                + "\n"
                for s in (0, 100)
            )
        )
        eval_dir = root / "evaluations" / group / str(index)
        eval_dir.mkdir(parents=True)
        (eval_dir / "eval.csv").write_text(
            "step,episode,start_sequence,sticky_seed,score,frames\n"
            f"0,0,0,,{score},40\n100,0,0,,{score},40\n"
        )
    (root / "results").mkdir()
    (root / "results" / "conditions.json").write_text(
        json.dumps(
            {
                "device": "cpu",
                "device_name": "cpu",
                "gpu": {},
                "cpu": {
                    "architecture": "x86_64",
                    "isa_flags": ["avx2"],
                    "torch_cpu_capability": "AVX2",
                },
                "python": {"version": "3.11.7"},
                "packages": {"torch": "2.13.0"},
                "numerics": {"torch_threads": 1, "environment": {}},
                "memory_bytes": 1,
            }
        )
    )


def test_verify_reports_identical_or_the_first_divergence_and_condition_changes(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    runs = {("deterministic", 0): ("a", 1), ("deterministic", 1): ("a", 1), ("gpu", 0): ("a", 1)}
    make_workspace(ours, runs)
    shutil.copytree(ours, theirs)
    study = StudyConfig(
        runs_per_group=2, groups={"deterministic": GroupConfig(), "gpu": GroupConfig()}
    )
    result = verify.verify(ours, theirs, study)
    assert result["identical"] and result["runs_compared"] == 3
    hashes = theirs / "runs" / "gpu" / "0" / "hashes.jsonl"
    hashes.write_text(hashes.read_text().replace("a100", "b100"))
    conditions = json.loads((theirs / "results" / "conditions.json").read_text())
    conditions["packages"]["torch"] = "2.12.0"
    conditions["memory_bytes"] = 2
    (theirs / "results" / "conditions.json").write_text(json.dumps(conditions))
    result = verify.verify(ours, theirs, study)
    assert not result["identical"]
    assert result["first_divergence"] == {"group": "gpu", "run": 0, "step": 100, "chain": "weights"}
    assert result["conditions_differing"] == ["memory_bytes", "packages.torch"]
    assert result["numeric_conditions_differing"] == [
        'packages.torch (ours "2.13.0", reference "2.12.0")'
    ]
    assert result["cpu_isa"]["ours"] == "native (this machine's widest: avx2, torch used AVX2)"


def test_verify_leaves_out_runs_that_differ_by_design(tmp_path):
    """The gpu group on a CPU draws its reduction order from OS entropy: its chains differ
    from any other training of it, which verify says instead of calling it a divergence."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_workspace(ours, {("deterministic", 0): ("a", 1), ("gpu", 0): ("a", 1)})
    make_workspace(theirs, {("deterministic", 0): ("a", 1), ("gpu", 0): ("b", 1)})
    study = StudyConfig(
        runs_per_group=1, groups={"deterministic": GroupConfig(), "gpu": GroupConfig()}
    )
    assert verify.verify(ours, theirs, study)["first_divergence"]["group"] == "gpu"
    for root in (ours, theirs):
        (root / "runs" / "gpu" / "0" / "conditions.json").write_text(
            json.dumps({"device": "cpu", "numerics": {"cpu_reduction_order": "random"}})
        )
    result = verify.verify(ours, theirs, study)
    assert result["identical"] and result["runs_compared"] == 1
    assert result["differ_by_design"] == ["gpu/0"]
    assert "different by design, not counted: gpu/0" in verify.summary(result)
    shutil.copytree(ours, tmp_path / "copy")
    same = verify.verify(ours, tmp_path / "copy", study)  # the same chains: compared as any
    assert same["runs_compared"] == 2 and same["differ_by_design"] == []


def test_verify_names_a_workspace_with_nothing_to_check_and_a_run_not_trained_here(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_workspace(theirs, {("deterministic", 0): ("a", 1), ("deterministic", 1): ("a", 1)})
    study = StudyConfig(runs_per_group=2, groups={"deterministic": GroupConfig()})
    with pytest.raises(InputError, match="ours: not a directory"):
        verify.verify(ours, theirs, study)
    ours.mkdir()
    with pytest.raises(InputError, match="ours: no trained runs to check"):
        verify.verify(ours, theirs, study)
    make_workspace(ours, {("deterministic", 0): ("a", 1)})
    result = verify.verify(ours, theirs, study)
    assert result["first_divergence"] == {
        "group": "deterministic",
        "run": 1,
        "step": 0,
        "chain": "not trained here",
    }
    assert verify.summary(result) == (  # no ISA line: both sides' are the same
        "verify: DIFFERENT: deterministic/1 is not trained here (the other side has it)\n"
        "of 2 runs: 1 identical, 1 not trained here\n"  # a partial replication says what held
        + verify.where_it_replicates(verify.recorded_conditions(theirs), "The reference's results")
    )


STUDY = StudyConfig(runs_per_group=2, groups={"deterministic": GroupConfig()})


def pair(tmp_path, theirs_runs=((0, "a"), (1, "a"))):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_workspace(ours, {("deterministic", 0): ("a", 1), ("deterministic", 1): ("a", 1)})
    make_workspace(theirs, {("deterministic", run): (chain, 1) for run, chain in theirs_runs})
    return ours, theirs


def run_dir(root, run=0):
    return root / "runs" / "deterministic" / str(run)


def test_a_run_the_reference_lacks_is_said_so_and_a_folder_without_runs_is_refused(tmp_path):
    ours, theirs = pair(tmp_path, theirs_runs=((0, "a"),))
    result = verify.verify(ours, theirs, STUDY)
    assert result["first_divergence"]["chain"] == verify.NOT_IN_REFERENCE
    assert verify.summary(result).startswith(
        "verify: DIFFERENT: deterministic/1 is not trained in the reference"
    )
    with pytest.raises(InputError, match="runs: no trained runs of this study"):
        verify.verify(ours, theirs / "runs", STUDY)  # the runs/ folder, not the workspace
    with pytest.raises(InputError, match="the same folder as"):
        verify.verify(ours, ours, STUDY)


def test_a_chain_that_stops_early_is_a_shorter_run_not_a_divergence(tmp_path):
    """A replication still under way, or a rerun of a record's first part, is identical as
    far as both go: a verdict of its own (exit 4), not DIFFERENT."""
    from reprodqn.forensics import chains

    ours, theirs = pair(tmp_path)
    hashes = run_dir(ours, 1) / "hashes.jsonl"
    hashes.write_text(hashes.read_text().splitlines()[0] + "\n")
    result = verify.verify(ours, theirs, STUDY)
    assert result["first_divergence"] is None and not result["identical"]
    assert result["tally"][verify.PREFIX] == 1 and result["tally"]["identical"] == 1
    assert chains.exit_code(result) == chains.PREFIX_EXIT
    assert verify.summary(result).startswith(
        "verify: identical as far as both sides go (2 runs, 1 of them going on further on one "
        "side): deterministic/1 identical through step 0; the reference goes on to step 100"
    )
    (run_dir(ours, 0) / "hashes.jsonl").write_text("")  # no checkpoint in common: parted
    assert chains.exit_code(verify.verify(ours, theirs, STUDY)) == 1


def test_scores_are_compared_where_both_sides_evaluated_and_only_there(tmp_path):
    ours, theirs = pair(tmp_path)
    shutil.rmtree(theirs / "evaluations")
    result = verify.verify(ours, theirs, STUDY)
    assert result["identical"] and result["checkpoints_evaluated_on_both"] == 0
    assert "no checkpoint is evaluated on both sides" in verify.summary(result)
    shutil.rmtree(ours / "evaluations")
    make_workspace(tmp_path / "other", {("deterministic", 1): ("a", 2)})
    shutil.copytree(tmp_path / "other" / "evaluations", theirs / "evaluations")
    make_workspace(tmp_path / "again", {("deterministic", 1): ("a", 1)})
    shutil.copytree(tmp_path / "again" / "evaluations", ours / "evaluations")
    result = verify.verify(ours, theirs, STUDY)
    assert result["first_divergence"] == {
        "group": "deterministic",
        "run": 1,
        "step": 0,
        "chain": verify.SCORES_ONLY,  # the weights are the same: not a run that parted
    }
    lines = verify.summary(result).splitlines()
    assert lines[0] == (
        "verify: DIFFERENT: deterministic/1 has the same weights and losses on both sides, "
        "but its eval.csv scores differ at checkpoint step 0 (one side's evaluation is not "
        "what these weights play: evaluated otherwise, or edited)"
    )
    assert lines[1] == "of 2 runs: 1 identical, 1 scores differ, chains identical"


def test_only_runs_both_sides_trained_by_design_to_differ_are_left_out(tmp_path):
    ours, theirs = pair(tmp_path, theirs_runs=((0, "b"), (1, "a")))
    (run_dir(ours) / "conditions.json").write_text(
        json.dumps({"device": "cpu", "numerics": {"cpu_reduction_order": "random"}})
    )
    result = verify.verify(ours, theirs, STUDY)  # ours alone drew its reduction order
    assert not result["identical"] and result["differ_by_design"] == []


def test_the_settings_that_differ_are_named_with_both_values(tmp_path):
    ours, theirs = pair(tmp_path, theirs_runs=((0, "b"), (1, "a")))
    for root, seed in ((ours, 124), (theirs, 123)):
        config = {"config": {"seeds": {"minibatch": seed, "init": 123}, "group": "deterministic"}}
        (run_dir(root) / "config.json").write_text(json.dumps(config | {"digest": f"d{seed}"}))
    lines = verify.summary(verify.verify(ours, theirs, STUDY)).splitlines()
    assert "settings that differ: seeds.minibatch (ours 124, reference 123)" in lines
    # settings in the digest explain the parting: train with the reference's, not trace ops
    assert verify.SETTINGS_FIRST in lines and verify.NEXT not in lines
    # outside the digest (how a run is computed or saved): no numbers moved, nothing listed
    for root, every, fast in ((ours, 3000, True), (theirs, 1500, False)):
        speed = {"cuda_graphs": fast, "replay_on_device": fast, "threads": 1}
        config = {"config": {"train": {"resume_every": every}, "compute": speed}}
        (run_dir(root) / "config.json").write_text(json.dumps(config | {"digest": "same"}))
    lines = verify.summary(verify.verify(ours, theirs, STUDY)).splitlines()
    assert not [line for line in lines if line.startswith("settings that differ")]
    assert verify.NEXT in lines and verify.SETTINGS_FIRST not in lines


def test_where_the_loss_chains_part_process_jsonl_says_it_sharper(tmp_path):
    ours, theirs = pair(tmp_path)
    for root, chain in ((ours, "p"), (theirs, "q")):
        records = [
            {"step": 50, "updates": 10, "loss_chain_sha256": chain},
            {"step": 100, "updates": 20, "loss_chain_sha256": chain},
        ]
        (run_dir(root) / "process.jsonl").write_text(
            "".join(json.dumps(record) + "\n" for record in records)
        )
    lines = (run_dir(theirs) / "hashes.jsonl").read_text().splitlines()
    last = json.loads(lines[1]) | {"loss_chain_sha256": "z"}
    (run_dir(theirs) / "hashes.jsonl").write_text(lines[0] + "\n" + json.dumps(last) + "\n")
    first = verify.verify(ours, theirs, STUDY)["first_divergence"]
    assert (first["step"], first["chain"]) == (100, "losses")
    assert first["process"] == {"step": 50, "updates": [1, 10]}
    assert "process.jsonl parts at step 50 (updates 1-10)" in verify._where(first)


def test_a_torn_chain_is_one_line_naming_the_file_and_line(tmp_path):
    ours, theirs = pair(tmp_path)
    hashes = run_dir(theirs, 1) / "hashes.jsonl"
    hashes.write_text(hashes.read_text()[:-20])
    with pytest.raises(InputError, match=r"1/hashes\.jsonl: line 2 is not JSON"):
        verify.verify(ours, theirs, STUDY)


def _rewrite_hashes(run, change):
    lines = [json.loads(line) for line in (run / "hashes.jsonl").read_text().splitlines()]
    (run / "hashes.jsonl").write_text("".join(json.dumps(change(x)) + "\n" for x in lines))


def test_checkpoints_at_other_steps_are_said_as_such(tmp_path):
    ours, theirs = pair(tmp_path)
    _rewrite_hashes(run_dir(ours, 1), lambda line: line | {"step": line["step"] * 2})
    result = verify.verify(ours, theirs, STUDY)
    assert result["first_divergence"]["chain"] == "step"
    assert "deterministic/1 has its checkpoints at other steps" in verify.summary(result)


def test_scores_that_part_before_the_chains_are_named_first_with_no_trace_advice(tmp_path):
    ours, theirs = pair(tmp_path)
    later = {"weights_sha256": "b100"}  # the weights part at step 100, the scores at 0
    _rewrite_hashes(run_dir(theirs, 1), lambda line: line | later if line["step"] else line)
    (theirs / "evaluations" / "deterministic" / "1" / "eval.csv").write_text(
        "step,episode,start_sequence,sticky_seed,score,frames\n0,0,0,,9,40\n100,0,0,,9,40\n"
    )
    result = verify.verify(ours, theirs, STUDY)
    first = result["first_divergence"]
    assert (first["chain"], first["step"]) == ("evaluation", 0)
    assert "reprodqn trace" not in verify.summary(result)


def test_a_shorter_run_is_not_sharpened_by_where_its_log_ends(tmp_path):
    ours, theirs = pair(tmp_path)
    records = [{"step": 50, "updates": 10, "loss_chain_sha256": "p"}]
    (run_dir(ours) / "process.jsonl").write_text(json.dumps(records[0]) + "\n")
    (run_dir(theirs) / "process.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [*records, records[0] | {"step": 80}])
    )
    hashes = run_dir(ours) / "hashes.jsonl"
    hashes.write_text(hashes.read_text().splitlines()[0] + "\n")
    (shorter,) = verify.verify(ours, theirs, STUDY)["prefix"]
    assert shorter == {
        "run": "deterministic/0",
        "through": 0,
        "longer": "the reference",
        "to": 100,
    }  # fmt: skip  (no process record: where its log ends is no parting)


def test_a_study_whose_every_run_differs_by_design_is_refused_in_one_line(tmp_path):
    ours, theirs = pair(tmp_path, theirs_runs=((0, "b"), (1, "b")))
    for root in (ours, theirs):
        for run in (0, 1):
            (run_dir(root, run) / "conditions.json").write_text(
                json.dumps({"device": "cpu", "numerics": {"cpu_reduction_order": "random"}})
            )
    with pytest.raises(InputError, match=r"every run trained on both sides differs by design"):
        verify.verify(ours, theirs, STUDY)


def test_the_cpu_instruction_sets_are_said_only_where_they_differ(tmp_path):
    ours, theirs = pair(tmp_path, theirs_runs=((0, "b"), (1, "a")))
    same = verify.summary(verify.verify(ours, theirs, STUDY))
    assert "CPU instruction set" not in same  # both sides' are the same: not a lead
    conditions = json.loads((theirs / "results" / "conditions.json").read_text())
    conditions["cpu"]["torch_cpu_capability"] = "AVX512"
    (theirs / "results" / "conditions.json").write_text(json.dumps(conditions))
    differ = verify.summary(verify.verify(ours, theirs, STUDY)).splitlines()
    assert any(line.startswith("CPU instruction set: ours ") for line in differ)


@pytest.mark.parametrize("numerics", ["universal", "standard"])
def test_the_verdict_says_where_the_references_results_replicate(tmp_path, numerics):
    """Identical or not, the last line says where the reference replicates: a universal
    one on any CPU and torch, a standard one (its conditions name no mode) on its stack."""
    ours, theirs = pair(tmp_path, theirs_runs=((0, "a"), (1, "a")))
    if numerics == "universal":
        conditions = json.loads((theirs / "results" / "conditions.json").read_text())
        conditions["numerics"].update(numerics="universal", numerics_spec="1")
        (theirs / "results" / "conditions.json").write_text(json.dumps(conditions))
    said = {
        "universal": "The reference's results are in the universal numerics, one chain on "
        "every machine: they replicate bit for bit on any x86-64 or aarch64 CPU and any torch "
        "the package supports; on an NVIDIA GPU not yet",
        "standard": "The reference's results are in the standard numerics: they replicate bit "
        "for bit only on the stack their conditions name: x86_64 CPU at floor native (AVX2), 1 "
        "thread, torch 2.13.0, no GPU;",
    }
    lines = verify.summary(verify.verify(ours, theirs, STUDY)).splitlines()
    assert lines[0].startswith("verify: identical") and lines[-1].startswith(said[numerics])
