"""The CartPole DQN (examples/dqn_cartpole.py), built on reprodqn.exact with its env in the
resume point through exact.GymEnv: one chain from two runs, a SIGKILL at a random moment
resumed to the uninterrupted chain and returns, and the lines it spends on exactness."""

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

SCRIPT = ROOT / "examples" / "dqn_cartpole.py"
DOCS = ROOT / "docs" / "your-experiment.md"
# 600 steps, 500 updates (a few dozen episodes end); a checkpoint every 100 steps, a
# resume point every 50
TINY = ["--steps", "600", "--learning-starts", "100", "--target-every", "100"]
TINY += ["--checkpoint-every", "100", "--resume-every", "50"]
RECORDS = ("hashes.jsonl", "returns.jsonl")


def dqn(out: Path, *extra: str, wait: bool = True, hash_seed: str = "0"):
    command = [sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra]
    env = cli_env(PYTHONHASHSEED=hash_seed)
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def records(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in RECORDS}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """Two runs of the same seeds, the second under another string-hash seed."""
    root = tmp_path_factory.mktemp("cartpole")
    dqn(root / "a")
    dqn(root / "b", hash_seed="1")
    return root


def test_two_runs_with_the_same_seeds_give_one_chain(uninterrupted):
    a, b = uninterrupted / "a", uninterrupted / "b"
    assert records(a) == records(b)
    chain = [json.loads(line) for line in (a / "hashes.jsonl").read_text().splitlines()]
    assert [line["step"] for line in chain] == list(range(0, 700, 100))
    assert chain[-1]["updates"] == 500
    assert len({line["weights_sha256"] for line in chain}) == 6  # it learns from step 100
    assert (a / "returns.jsonl").read_text().count("\n") >= 10  # episodes ended, were logged


def test_killed_at_a_random_moment_and_resumed_it_ends_with_the_uninterrupted_chain(
    uninterrupted, tmp_path
):
    """SIGKILL once a random number of resume points is written, after a random delay:
    the same command again resumes from the last intact point, the env (its RNG, the cart,
    TimeLimit's count, the episode statistics) and the replay with it."""
    draw = random.Random(time.time_ns())  # a different moment each run; printed on failure
    after, delay = draw.randint(1, 10), draw.uniform(0.0, 0.3)
    latest = tmp_path / "run" / "resume" / "latest.json"
    process = dqn(tmp_path / "run", wait=False)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if latest.exists() and json.loads(latest.read_text())["step"] >= after * 50:
            time.sleep(delay)
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    process.wait()
    killed_at = json.loads(latest.read_text())["step"]
    dqn(tmp_path / "run")
    assert records(tmp_path / "run") == records(uninterrupted / "a"), (after, delay, killed_at)


def test_the_docs_state_the_lines_it_spends_on_exactness():
    marked = [line for line in SCRIPT.read_text().splitlines() if "  # exact" in line]
    stated = re.search(r"CartPole DQN spends (\d+) lines on exactness", DOCS.read_text())
    assert stated and int(stated.group(1)) == len(marked)
