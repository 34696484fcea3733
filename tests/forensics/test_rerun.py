"""Spot-checking a shipped run: retrain it to a step and compare the chain prefix, from
scratch or from a resume point the bundle ships."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reprodqn.config.params import load_params, resolve_run
from reprodqn.core.errors import InputError
from reprodqn.core.workspace import read_hashes, resume_points_dir, run_dir
from reprodqn.forensics import rerun, verify
from reprodqn.training.loop import train
from tests.helpers import PARAMS, TINY, cli_env, train_tiny


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A workspace with params.yaml and a finished deterministic/0 at tiny scale."""
    root = tmp_path_factory.mktemp("shipped")
    params = load_params(PARAMS, TINY)
    (root / "params.yaml").write_text(yaml.safe_dump(params.model_dump(mode="json")))
    train_tiny(params, run_dir(root / "runs", "deterministic", 0))
    return root, params


def test_training_until_a_step_then_on_gives_the_uninterrupted_chain(shipped, tmp_path):
    root, params = shipped
    config = resolve_run(params, "deterministic", 0)
    for _ in train(config, tmp_path, until=350):
        pass
    assert not (tmp_path / "complete.json").exists()
    assert json.loads((tmp_path / "resume" / "latest.json").read_text())["step"] == 350
    for _ in train(config, tmp_path):
        pass
    assert read_hashes(tmp_path) == read_hashes(run_dir(root / "runs", "deterministic", 0))


def _spot_check(root, until, scratch):
    config = rerun.shipped_config(root, "deterministic", 0, PARAMS)
    return verify.spot_check(root, config, until, scratch)


def test_spot_check_from_scratch_matches_the_shipped_prefix(shipped, tmp_path, capsys):
    root, _ = shipped
    result = _spot_check(root, 400, tmp_path / "rerun")
    assert result["identical"] and result["from_step"] == 0
    assert result["records_compared"] == 3 + 4  # checkpoints 0-400, process 100-400
    said = verify.spot_check_summary(result).splitlines()
    assert "identical" in said[0]
    # and where the run replicates, from the conditions it recorded (the default numerics)
    assert said[-1].startswith("This run's results are in the universal numerics, one chain")
    # its progress is a training run's: no ETA promised from the replay-filling rate
    progress = capsys.readouterr().err
    assert "verify --rerun deterministic/0: 0/400 steps (0.0%), filling replay" in progress
    assert "learning started at step" in progress


def test_spot_check_names_the_first_record_that_differs(shipped, tmp_path):
    root, _ = shipped
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    hashes = run_dir(copy / "runs", "deterministic", 0) / "hashes.jsonl"
    lines = [json.loads(line) for line in hashes.read_text().splitlines()]
    lines[2]["loss_chain_sha256"] = "f" * 64  # step 400
    hashes.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _spot_check(copy, 600, tmp_path / "rerun")
    assert not result["identical"]
    assert result["first"] == {"file": "hashes.jsonl", "step": 400, "fields": ["loss_chain_sha256"]}
    # it stopped training there, not at --until: a parting replication is named sooner
    assert read_hashes(tmp_path / "rerun")[-1]["step"] == 400
    assert "DIFFERENT" in verify.spot_check_summary(result)


def test_the_earliest_record_that_differs_is_named_whichever_file_holds_it(tmp_path):
    """A loss chain parts in process.jsonl (every log_every steps) before the checkpoint
    after it shows it in hashes.jsonl: the earlier is named."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for run, parted in ((ours, "a"), (theirs, "b")):
        run.mkdir()
        checkpoints = [(0, "a"), (200, parted)]
        (run / "hashes.jsonl").write_text(
            "".join(
                json.dumps({"step": step, "weights_sha256": "w", "loss_chain_sha256": chain}) + "\n"
                for step, chain in checkpoints
            )
        )
        records = [(100, "a", 5), (150, parted, 10), (200, parted, 15)]
        (run / "process.jsonl").write_text(
            "".join(
                json.dumps({"step": step, "loss_chain_sha256": chain, "updates": updates}) + "\n"
                for step, chain, updates in records
            )
        )
    result = rerun.compare_prefix(theirs, ours, until=200)
    assert result["first"] == {
        "file": "process.jsonl",
        "step": 150,
        "fields": ["loss_chain_sha256"],
    }


def test_a_shipped_resume_point_starts_the_spot_check_late(shipped, tmp_path):
    root, params = shipped
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    config = resolve_run(params, "deterministic", 0)
    out = resume_points_dir(copy, "deterministic", 0)
    rerun.make_resume_point(
        config, run_dir(copy / "runs", "deterministic", 0), tmp_path / "scratch", out, 300
    )
    result = _spot_check(copy, 600, tmp_path / "rerun")
    assert result["identical"] and result["from_step"] == 300
    assert result["records_compared"] == 2 + 3  # computed here: checkpoints 400, 600; process
    # a corrupted shipped point is refused, not trained from
    victim = next(p for p in out.rglob("*.npy"))
    victim.write_bytes(victim.read_bytes()[:-1] + b"\x01")
    with pytest.raises(InputError, match="corrupted"):
        _spot_check(copy, 600, tmp_path / "rerun2")


def test_a_resume_point_off_the_runs_own_chain_is_refused(shipped, tmp_path):
    root, params = shipped
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    hashes = run_dir(copy / "runs", "deterministic", 0) / "hashes.jsonl"
    hashes.write_text(hashes.read_text().replace('"updates": 49', '"updates": 48'))
    with pytest.raises(InputError, match="does not replicate"):
        rerun.make_resume_point(
            resolve_run(params, "deterministic", 0),
            run_dir(copy / "runs", "deterministic", 0),
            tmp_path / "scratch",
            tmp_path / "out",
            400,
        )
    assert not (tmp_path / "out").exists()


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rerun", "deterministic", "--until", "200"], "expected GROUP/RUN"),
        (["--rerun", "deterministic/0"], "expected --until"),
        (["--rerun", "deterministic/0", "--until", "9999"], "has only 600 steps"),
        (
            ["--rerun", "deterministic/0", "--until", "200", "--set", "agent.discount=0.9"],
            "mismatched params: agent.discount (here 0.9, shipped 0.99))",
        ),
        (["--rerun", "minibatch/7", "--until", "200"], "--rerun minibatch/7: expected 0.."),
    ],
)
def test_spot_check_bad_input_is_one_line(shipped, tmp_path, args, message):
    root, _ = shipped
    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    if "--set" in args:  # the reference has no params.yaml of its own: ours are used
        copy = tmp_path / "ref"
        shutil.copytree(root / "runs", copy / "runs")
        reference = copy
    else:
        reference = root
    out = _cli("verify", "--reference", str(reference), *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_spot_check_from_the_command_line_in_an_empty_directory(shipped, tmp_path):
    """A reader needs no params.yaml where they stand: the reference's own is used."""
    root, _ = shipped
    out = _cli(
        "verify",
        "--reference",
        str(root),
        "--rerun",
        "deterministic/0",
        "--until",
        "200",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("verify: identical: deterministic/0 retrained from scratch")


def test_a_spot_check_signs_an_attestation_of_its_own_kind(shipped, tmp_path):
    """--rerun with --attest: the spot-check's in-toto Statement beside the bundle, which
    `verify BUNDLE` lists apart from replications of the whole study."""
    from reprodqn.forensics import attestation
    from tests.forensics.test_bundle_check import rewrite_manifest
    from tests.report.test_signing import keypair

    root, _ = shipped
    bundle = shutil.copytree(root, tmp_path / "reprodqn-bundle")
    rewrite_manifest(bundle, crate=False)  # a bundle as far as --attest needs: its manifest
    key = keypair(tmp_path, "reader")
    rerun = ["--rerun", "deterministic/0", "--until", "200", "--attest", str(key)]
    out = _cli("verify", "--reference", str(bundle), *rerun, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "an in-toto Statement of this spot-check" in out.stdout
    assert "spot-checked: deterministic/0 from step 0 to 200 on " in attestation.check(bundle)


def test_a_bundle_ships_the_resume_point_and_the_spot_check_starts_there(shipped, tmp_path):
    from reprodqn.report import bundle

    root, _ = shipped
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(root / "params.yaml", work / "params.yaml")
    # trained by the command line, as a study is: at the params' instruction-set floor
    out = _cli("train", "--group", "deterministic", "--run", "0", cwd=work)
    assert out.returncode == 0, out.stderr
    out = _cli("resume-point", "deterministic/0", "--step", "400", cwd=work)
    assert out.returncode == 0, out.stderr
    shipped_files = {str(p) for p in bundle.collect(work, checkpoints=False)}
    assert "resume-points/deterministic/0/latest.json" in shipped_files
    assert "resume-points/deterministic/0/logs/hashes.jsonl" in shipped_files
    out = _cli(
        "verify", "--reference", str(work), "--rerun", "deterministic/0", "--until", "600", cwd=work
    )
    assert out.returncode == 0, out.stderr
    assert "from the shipped resume point at step 400" in out.stdout


def test_commands_with_a_reference_take_its_params_unless_given(tmp_path):
    import argparse

    from reprodqn.cli.common import resolve_params_path

    bundle = tmp_path / "bundle"
    point = bundle / "resume-points" / "deterministic" / "0"
    point.mkdir(parents=True)
    (bundle / "params.yaml").write_text("# the shipped params\n")
    cases = [
        ({"reference": bundle}, bundle / "params.yaml"),
        ({"resume": point}, bundle / "params.yaml"),
        ({"resume": point / "step-000000400"}, bundle / "params.yaml"),  # a point's own folder
        ({"reference": tmp_path, "command": "verify"}, Path("params.yaml")),  # none there: ./
        ({"reference": bundle, "params": Path("mine.yaml")}, Path("mine.yaml")),
    ]
    for given, expected in cases:
        args = argparse.Namespace(**{"params": None, **given})
        resolve_params_path(args)
        assert args.params == expected, given
    # the archive itself, or a folder that is not there: one line saying so, not "no params"
    archive = tmp_path / "reprodqn-bundle.tar.gz"
    archive.write_bytes(b"")
    for reference, message in (
        (archive, "not a directory (expected a workspace or an unpacked bundle; unpack it first"),
        (tmp_path / "nothing-here", "not a directory (expected a workspace or an unpacked bundle)"),
    ):
        with pytest.raises(InputError, match=re.escape(message)):
            resolve_params_path(argparse.Namespace(params=None, reference=reference))


def test_a_run_that_differs_by_design_is_refused_before_it_is_retrained(tmp_path):
    """The gpu group's runs never repeat their chain (nondeterministic kernels, or on a CPU
    their emulation): --rerun said DIFFERENT after retraining, with the trace hint."""
    config = resolve_run(load_params(PARAMS), "gpu", 0)
    with pytest.raises(InputError, match="--rerun gpu/0: differs by design"):
        verify.spot_check(tmp_path, config, 100, tmp_path / "scratch")
    assert not (tmp_path / "scratch").exists()


def test_a_run_resumed_from_its_point_at_step_0_writes_that_checkpoint_once(tmp_path):
    """The loop wrote step 0's checkpoint whenever it started at step 0, also when resuming
    from a point there: a second step-0 line, which the chain now refuses."""
    config = resolve_run(load_params(PARAMS, TINY), "deterministic", 0)
    for until in (0, 400):
        for _ in train(config, tmp_path / "resumed", until=until):
            pass
    for _ in train(config, tmp_path / "whole", until=400):
        pass
    steps = [line["step"] for line in read_hashes(tmp_path / "resumed")]
    assert steps == [0, 200, 400]
    assert read_hashes(tmp_path / "resumed") == read_hashes(tmp_path / "whole")


def test_a_resume_point_at_step_0_is_kept_and_a_spot_check_starts_from_it(shipped, tmp_path):
    """`resume-point --step 0` failed: no process record is written by step 0, and it
    copied the missing process.jsonl."""
    from reprodqn.core.progress import RunProgress

    root, params = shipped
    config = resolve_run(params, "deterministic", 0)
    shipped_run = run_dir(root / "runs", "deterministic", 0)
    out = tmp_path / "points" / "deterministic" / "0"
    progress = RunProgress("resume-point deterministic/0", 0, 0, config.replay.learning_starts)
    rerun.make_resume_point(config, shipped_run, tmp_path / "scratch", out, 0, progress.update)
    assert json.loads((out / "latest.json").read_text())["step"] == 0
    assert (out / rerun.SHIPPED_LOGS / "process.jsonl").read_text() == ""
    scratch = tmp_path / "again"
    rerun.train_until(config, scratch, 200, out, reference_run=shipped_run)
    assert rerun.compare_prefix(shipped_run, scratch, 200)["identical"]
