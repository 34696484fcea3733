"""The study's exactness, shown on a short run: two runs give one chain; a run killed with
SIGKILL at a random moment and started again ends with the uninterrupted run's chain; a
changed seed is named by `reprodqn verify` at the first checkpoint it moves."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"steps": 600, "checkpoint_every": 100, "resume_every": 50}


def params(tmp_path: Path, **seeds: int) -> Path:
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    doc["train"].update(SHORT)
    doc["seeds"].update(seeds)
    path = tmp_path / f"params-{len(list(tmp_path.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def train(out: Path, params_file: Path, wait: bool = True):
    command = [sys.executable, str(ROOT / "train.py"), "--params", str(params_file)]
    command += ["--out", str(out)]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL)
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def verify(a: Path, b: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "reprodqn.cli", "verify", str(a), str(b)]
    # from the study's root, beside its own params.yaml, as its README runs it
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def test_two_runs_give_one_chain(tmp_path):
    same = params(tmp_path)
    train(tmp_path / "a" / "run", same)
    train(tmp_path / "b" / "run", same)
    chain = (tmp_path / "a" / "run" / "hashes.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in chain] == [0, 100, 200, 300, 400, 500, 600]
    checked = verify(tmp_path / "a", tmp_path / "b")
    assert checked.returncode == 0 and "identical" in checked.stdout, checked.stdout


def test_killed_at_a_random_moment_and_resumed_it_ends_with_the_same_chain(tmp_path):
    same = params(tmp_path)
    train(tmp_path / "whole" / "run", same)
    draw = random.Random(time.time_ns())  # a different moment each time
    after, delay = draw.randint(1, 10), draw.uniform(0.0, 0.2)
    latest = tmp_path / "killed" / "run" / "resume" / "latest.json"
    process = train(tmp_path / "killed" / "run", same, wait=False)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if latest.exists() and json.loads(latest.read_text())["step"] >= after * 50:
            time.sleep(delay)
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    process.wait()
    train(tmp_path / "killed" / "run", same)
    checked = verify(tmp_path / "whole", tmp_path / "killed")
    assert checked.returncode == 0, (after, delay, checked.stdout)


def test_a_changed_seed_is_named_at_the_first_checkpoint_it_moves(tmp_path):
    train(tmp_path / "a" / "run", params(tmp_path))
    train(tmp_path / "b" / "run", params(tmp_path, minibatch=30))
    checked = verify(tmp_path / "a", tmp_path / "b")
    assert checked.returncode == 1
    assert "first divergence in run at checkpoint step 100 (weights, losses)" in checked.stdout
