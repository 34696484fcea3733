"""verify says only what it compared (issue 70's cases 7 to 11): a deleted checkpoint file
is named, not called identical; a chain line changed past the 12 characters a message
shows is shown in full; --until names the last checkpoint both sides have, not the step
asked for; the files of a run folder it does not compare are named; and `verify --help`
says what --scratch is for."""

from __future__ import annotations

import json

import pytest
import torch

from reprodqn import exact
from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.forensics import chains, checkpoint_files, script_rerun, verify
from tests.forensics.test_checkpoint_files import STUDY, with_checkpoints
from tests.forensics.test_verify import make_workspace


def _run(folder, losses, steps=(0, 1500, 3000), config=None):
    """A HashChain run with a checkpoint at each of `steps`, losses folded in between."""
    chain = exact.HashChain(folder)
    net = torch.nn.Linear(2, 2)
    torch.nn.init.zeros_(net.weight)
    torch.nn.init.zeros_(net.bias)
    for step, loss in zip(steps, [None, *losses], strict=True):
        if loss is not None:
            chain.extend([loss])
        chain.checkpoint(step, net)
    if config is not None:
        (folder / "config.json").write_text(json.dumps({"config": config, "digest": str(config)}))


# ---------------------------------------------------------------------------------------------
# Case 7: a deleted checkpoint file


def test_a_deleted_checkpoint_file_is_named_not_called_identical(tmp_path):
    for side in ("a", "b"):
        _run(tmp_path / side / "seed-0", [1.0, 2.0])
    deleted = tmp_path / "b" / "seed-0" / "checkpoints" / "step-000001500.safetensors"
    deleted.unlink()
    with pytest.raises(InputError) as error:
        chains.compare(tmp_path / "a", tmp_path / "b")
    assert str(error.value) == (
        f"{deleted}: missing checkpoint file (line 2 of its run's hashes.jsonl records step "
        "1500, and the run holds 2 other checkpoint files): deleted, or not copied with the run"
    )


def test_a_deleted_checkpoint_file_is_named_by_verify_reference(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        make_workspace(root, {("deterministic", 0): ("a", 1), ("deterministic", 1): ("a", 1)})
        with_checkpoints(root)
    run_dir = workspace.run_dir(theirs / workspace.RUNS, "deterministic", 1)
    workspace.checkpoint_path(run_dir, 0).unlink()  # the first: no earlier file to go by
    with pytest.raises(InputError, match=r"1/checkpoints/step-000000000\.safetensors: missing"):
        verify.verify(ours, theirs, STUDY)


def test_a_run_without_any_checkpoint_files_checks_none_as_before(tmp_path):
    _run(tmp_path / "run", [1.0, 2.0])
    for path in (tmp_path / "run" / "checkpoints").iterdir():
        path.unlink()  # hashes only, as a bundle without --checkpoints ships them
    assert checkpoint_files.check_run(tmp_path / "run") == 0


# ---------------------------------------------------------------------------------------------
# Case 8: a chain line changed past the 12 characters a message shows


def _change_last_weights_hash(run_dir, at=20):
    """Change one hex digit of the last line's weights SHA-256, `at` characters in."""
    path = run_dir / workspace.HASHES
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    digest = last["weights_sha256"]
    last["weights_sha256"] = digest[:at] + ("0" if digest[at] != "0" else "1") + digest[at + 1 :]
    path.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")
    return digest, last["weights_sha256"]


def test_a_chain_line_changed_past_twelve_characters_is_shown_in_full(tmp_path):
    _run(tmp_path / "run", [1.0, 2.0])
    actual, recorded = _change_last_weights_hash(tmp_path / "run")
    with pytest.raises(InputError) as error:
        checkpoint_files.check_run(tmp_path / "run")
    message = str(error.value)
    assert f"weights SHA-256 {actual}, but its chain's line for step 3000 records {recorded}" in (
        message
    )  # the two as they differ, not "913723987b7e ... records 913723987b7e"
    _change_last_weights_hash(tmp_path / "run", at=3)
    with pytest.raises(InputError, match=r"weights SHA-256 \w{12}, but .* records \w{12} \("):
        checkpoint_files.check_run(tmp_path / "run")  # apart in 12: 12 are enough


# ---------------------------------------------------------------------------------------------
# Case 9: --until names what it compared


def test_until_names_the_last_checkpoint_both_sides_have(tmp_path):
    """B differs only in a setting: its chain parts after step 0, so --until 1499 compared
    step 0 alone, and said "identical through step 1499"."""
    _run(tmp_path / "a" / "seed-0", [1.0, 2.0], config={"agent": {"batch_size": 32}})
    _run(tmp_path / "b" / "seed-0", [1.5, 2.0], config={"agent": {"batch_size": 64}})
    result = chains.compare(tmp_path / "a", tmp_path / "b", until=1499)
    assert chains.exit_code(result) == 0  # identical, as far as it says
    lines = chains.summary(result).splitlines()
    assert lines[0].startswith(
        "verify: identical through step 0 (the last checkpoint both sides have at or before "
        "--until 1499): 1 run"
    )
    assert "settings that differ: agent.batch_size (ours 32, reference 64)" in lines
    _run(tmp_path / "c" / "seed-0", [1.0, 2.0])
    result = chains.compare(tmp_path / "a", tmp_path / "c", until=10000)  # past the end
    assert chains.summary(result).startswith(
        "verify: identical through step 3000 (the last checkpoint both sides have at or "
        "before --until 10000)"
    )
    exactly = chains.summary(chains.compare(tmp_path / "a", tmp_path / "c", until=1500))
    assert exactly.startswith("verify: identical through step 1500: 1 run")
    _run(tmp_path / "late" / "seed-0", [1.0], steps=(10, 1500))
    _run(tmp_path / "late2" / "seed-0", [1.0], steps=(10, 1500))
    with pytest.raises(InputError, match=r"^--until 5: seed-0 has no checkpoint at or before"):
        chains.compare(tmp_path / "late", tmp_path / "late2", until=5)


STOPS_AT_3 = """
import argparse, pathlib
import torch
from reprodqn import exact
parser = argparse.ArgumentParser()
parser.add_argument("--out", type=pathlib.Path)
parser.add_argument("--until", type=int, default=3)
args = parser.parse_args()
chain = exact.HashChain(args.out)
for step in range(min(args.until, 3) + 1):  # the run's own end: step 3
    chain.extend([float(step)])
    chain.checkpoint(step, {"w": torch.full((1,), float(step))})
"""


def test_a_rerun_past_the_runs_end_names_where_both_stop(tmp_path):
    from tests.exact.test_api import script_run

    run, _ = script_run(tmp_path, STOPS_AT_3)
    result = script_rerun.rerun(run, 10000, tmp_path / "scratch")
    assert script_rerun.rerun_summary(result).splitlines()[0] == (
        f"verify: identical: {run} rerun here with --until 10000 is the same through step 3, "
        "the last checkpoint both have; 4 checkpoints match"
    )  # not "rerun here to step 10000"


# ---------------------------------------------------------------------------------------------
# Case 11: --scratch's help


def test_verify_help_says_scratch_serves_a_rerun_of_one_result_folder_too(capsys):
    from reprodqn.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    scratch = text[text.index("--scratch SCRATCH ") :]
    assert "with one result folder and --until STEP" in scratch
    assert "with --rerun: where" not in scratch  # what it said when --rerun had it alone


# ---------------------------------------------------------------------------------------------
# Case 10: the files verify does not compare


def test_files_verify_does_not_compare_are_named_with_their_bytes_differing(tmp_path):
    """Returns kept only in a log, undeclared to the chain: verify said identical while
    returns.jsonl differed, and named no file it had left out."""

    def run(folder, returns, declare):
        log = exact.JsonLog(folder / "returns.jsonl")
        chain = exact.HashChain(folder, results=[log] if declare else ())
        for step, value in enumerate(returns, 1):
            log.write({"step": step, "return": value})
            chain.checkpoint(step, {"w": torch.zeros(2)})
        (folder / "notes.txt").write_text("the same on both sides")

    for side, returns in (("a", [1.0, 2.0, 3.0]), ("b", [1.0, 2.5, 3.0])):
        run(tmp_path / side / "seed-0", returns, declare=False)
        run(tmp_path / f"declared-{side}" / "seed-0", returns, declare=True)
    (tmp_path / "b" / "seed-0" / "extra.csv").write_text("1\n")
    result = chains.compare(tmp_path / "a", tmp_path / "b")
    assert result["identical"]  # the chains are: the line below says what they leave out
    assert chains.summary(result).splitlines()[1] == (
        "not compared (outside the chains): seed-0/extra.csv (one side only), "
        "seed-0/notes.txt, seed-0/returns.jsonl (bytes differ); declare result logs to the "
        "chain (HashChain(out, results=[log])) to compare them"
    )  # config.json, conditions.json, the chain and its checkpoint files are compared
    declared = chains.compare(tmp_path / "declared-a", tmp_path / "declared-b")
    assert declared["first_divergence"]["fields"] == ["result logs"]
    assert "result logs declared to the chain" in chains.summary(declared)
