"""Cross-machine replication on every machine that runs the tests: a tiny training run at the
default CPU floor must reproduce the hash chain committed in tests/golden/, which another
machine produced (its CPU is in tiny-nips-4000.machine.json). A failure here is a finding:
note this machine's CPU, run `reprodqn verify`, and see the README's "What replicates
where" table."""

from __future__ import annotations

import json
import subprocess
import sys

from reprodqn import isa

from .conftest import PARAMS, ROOT, cli_env

GOLDEN = ROOT / "tests" / "golden"
COMMAND = ["train", "--group", "deterministic", "--run", "0", "--params", str(PARAMS)]
OVERRIDES = ["agent.network=nips", "agent.batch_size=8", "agent.target_sync_every=100",
             "agent.epsilon_decay_steps=300", "replay.capacity=1000",
             "replay.learning_starts=200", "train.steps=4000", "train.checkpoint_every=500",
             "train.resume_every=400", "train.log_every=100"]


def test_a_tiny_run_reproduces_the_golden_chain_of_another_machine(tmp_path):
    argv = [sys.executable, "-m", "reprodqn.cli", *COMMAND, "--runs-dir", str(tmp_path)]
    for item in OVERRIDES:
        argv += ["--set", item]
    subprocess.run(argv, check=True, capture_output=True, env=cli_env(), cwd=tmp_path)
    ours = (tmp_path / "deterministic" / "0" / "hashes.jsonl").read_text().splitlines()
    golden = (GOLDEN / "tiny-nips-4000.hashes.jsonl").read_text().splitlines()
    producer = json.loads((GOLDEN / "tiny-nips-4000.machine.json").read_text())["cpu"]
    here = isa.cpuinfo().get("model name", "unknown CPU")
    first = next((json.loads(g)["step"] for o, g in zip(ours, golden, strict=True) if o != g),
                 None)
    assert first is None, (f"chain differs from the golden one from {producer['model']} "
                           f"(family {producer['family']}, model {producer['model_number']}) "
                           f"on this {here}, first at checkpoint step {first}")
    assert json.loads(ours[-1])["updates"] == 949  # the authors' count: t > 200, t % 4 == 0
