"""The second agent, PPO (examples/ppo_breakout.py), built on reprodqn.exact alone: one
chain from two runs at 1 and at 2 threads, a SIGKILL at a random moment resumed to the
uninterrupted chain, a changed seed named by `verify` at the first checkpoint it moves,
its policy evaluated under the paper's protocol, and the lines it spends on exactness."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli_env

SCRIPT = ROOT / "examples" / "ppo_breakout.py"
DOCS = ROOT / "docs" / "your-experiment.md"
# 8 updates of 2 envs x 32 steps (a game or two ends in each env); a checkpoint every 2
# updates, a resume point every update
TINY = ["--steps", "512", "--envs", "2", "--rollout", "32", "--epochs", "2", "--minibatches", "2"]
TINY += ["--checkpoint-every", "2", "--resume-every", "1"]
RECORDS = ("hashes.jsonl", "scores.jsonl", "policy.pt")


def ppo(out: Path, *extra: str, wait: bool = True, hash_seed: str = "0") -> subprocess.Popen | str:
    command = [sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra]
    env = cli_env(PYTHONHASHSEED=hash_seed)
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def reprodqn(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "reprodqn.cli", *argv]
    return subprocess.run(command, env=cli_env(), capture_output=True, text=True, cwd=cwd)


def records(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in RECORDS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two runs at 1 thread and two at 2 threads, same seeds; the second of each pair in a
    Python with another string-hash seed (a policy file's bytes depended on it)."""
    root = tmp_path_factory.mktemp("ppo")
    for threads in ("1", "2"):
        for copy, hash_seed in (("a", "0"), ("b", "1")):
            ppo(root / f"t{threads}" / copy, "--threads", threads, hash_seed=hash_seed)
    return root


@pytest.mark.parametrize("threads", ["1", "2"])
def test_two_runs_with_the_same_seeds_give_one_chain(runs, threads):
    a, b = runs / f"t{threads}" / "a", runs / f"t{threads}" / "b"
    assert records(a) == records(b)
    chain = [json.loads(line) for line in (a / "hashes.jsonl").read_text().splitlines()]
    assert [line["step"] for line in chain] == [0, 128, 256, 384, 512]
    assert (a / "scores.jsonl").read_text().count("\n") >= 2  # games ended, and were logged
    assert chain[-1]["updates"] == 8 * 2 * 2  # updates x epochs x minibatches
    assert len({line["weights_sha256"] for line in chain}) == 5  # it learns: weights move


def test_killed_at_a_random_moment_and_resumed_it_ends_with_the_uninterrupted_chain(runs, tmp_path):
    """SIGKILL once a random number of resume points is written, after a random delay: the
    same command again resumes from the last intact point. (The score log is compared too;
    that a resumed log drops the lines written after its point is test_api's.)"""
    draw = random.Random(time.time_ns())  # a different moment each run; printed on failure
    after, delay = draw.randint(1, 6), draw.uniform(0.0, 0.5)
    latest = tmp_path / "run" / "resume" / "latest.json"
    process = ppo(tmp_path / "run", "--threads", "1", wait=False)
    assert isinstance(process, subprocess.Popen)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if latest.exists() and json.loads(latest.read_text())["step"] >= after * 64:
            time.sleep(delay)
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    process.wait()
    killed_at = json.loads(latest.read_text())["step"]
    ppo(tmp_path / "run", "--threads", "1")
    assert records(tmp_path / "run") == records(runs / "t1" / "a"), (after, delay, killed_at)


def test_verify_names_the_first_checkpoint_a_changed_seed_moves(runs, tmp_path):
    ppo(tmp_path / "t1" / "a", "--threads", "1", "--seed-minibatch", "30")
    verify = reprodqn("verify", str(runs / "t1"), str(tmp_path / "t1"), cwd=tmp_path)
    assert verify.returncode == 1
    assert "first divergence in a at checkpoint step 128 (weights, losses)" in verify.stdout
    assert "only in ours: b" in verify.stdout


def test_verify_reruns_a_run_from_its_recorded_command_to_a_step(runs, tmp_path):
    """`verify RUN --until STEP` runs the command config.json records again, here; a
    script changed since (another default seed) is named at its first checkpoint."""
    rerun = ["verify", str(runs / "t1" / "a"), "--until", "256", "--scratch"]
    same = reprodqn(*rerun, str(tmp_path / "same"), cwd=tmp_path)
    assert same.returncode == 0, same.stderr[-2000:]
    assert "rerun here to step 256; 3 checkpoints match" in same.stdout
    changed = tmp_path / "changed.py"
    changed.write_text(
        SCRIPT.read_text().replace(
            '"--seed-minibatch", type=int, default=3', '"--seed-minibatch", type=int, default=30'
        )
    )
    parted = reprodqn(*rerun, str(tmp_path / "parted"), "--script", str(changed), cwd=tmp_path)
    assert parted.returncode == 1, parted.stderr[-2000:]
    assert "parts at checkpoint step 128 (weights, losses)" in parted.stdout


def test_another_config_in_the_same_folder_is_refused_in_one_line(runs):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(runs / "t1" / "a"), *TINY, "--lr", "1e-3"],
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode == 2
        and "different config: lr (now 0.001, recorded 0.00025);" in done.stderr
    )
    assert done.stderr.count("\n") == 1, done.stderr


def test_its_policy_is_evaluated_under_the_papers_protocol(runs, tmp_path):
    policy = runs / "t1" / "a" / "policy.pt"
    sets = ["--set", "evaluation.episodes=2", "--set", "evaluation.max_frames=400"]
    done = reprodqn(
        "evaluate-policy", str(policy), "--out-dir", "e", "--workers", "1", *sets, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = (tmp_path / "e" / "eval.csv").read_text().splitlines()
    assert len(rows) == 1 + 2  # a header and the two episodes


@pytest.fixture(scope="module")
def universal_runs(tmp_path_factory) -> Path:
    """The universal numerics at the portable floor and 1 thread, and at the machine's
    own floor and 2 threads; a third run stopped halfway (--until) and resumed."""
    root = tmp_path_factory.mktemp("ppo-universal")
    ppo(root / "portable-1", "--numerics", "universal")
    ppo(root / "native-2", "--numerics", "universal", "--cpu-floor", "native", "--threads", "2")
    ppo(root / "resumed", "--numerics", "universal", "--until", "256")
    ppo(root / "resumed", "--numerics", "universal")
    return root


def test_the_universal_ppo_gives_one_chain_at_every_floor_and_thread_count(universal_runs):
    portable, native = universal_runs / "portable-1", universal_runs / "native-2"
    assert records(portable) == records(native)
    chain = [json.loads(line) for line in (portable / "hashes.jsonl").read_text().splitlines()]
    assert {line["numerics"] for line in chain} == {"universal"}
    assert len({line["weights_sha256"] for line in chain}) == 5  # it learns: weights move
    config = json.loads((native / "config.json").read_text())
    assert (config["config"]["cpu_floor"], config["config"]["threads"]) == ("native", 2)


def test_the_universal_ppo_stopped_and_resumed_ends_with_the_uninterrupted_chain(
    universal_runs,
):
    assert records(universal_runs / "resumed") == records(universal_runs / "portable-1")


def test_the_universal_ppo_differs_from_the_standard_one(runs, universal_runs):
    """Another init and another sampling rule: the modes' chains are not comparable."""
    standard = (runs / "t1" / "a" / "hashes.jsonl").read_text()
    assert standard != (universal_runs / "portable-1" / "hashes.jsonl").read_text()


def test_the_docs_state_the_lines_it_spends_on_exactness():
    marked = [line for line in SCRIPT.read_text().splitlines() if "  # exact" in line]
    stated = re.search(r"spends (\d+) lines on exactness", DOCS.read_text())
    assert stated and int(stated.group(1)) == len(marked)
