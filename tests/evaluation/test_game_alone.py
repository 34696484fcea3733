"""The game alone decides (issue 72, item 7): `--set env.game=X` with the default params
trains and evaluates any game; its packaged start states where it has them, else no-op
starts, said in one line. Before, params.yaml's Breakout states refused every other game."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import PARAMS, TINY, cli_env

SMALL = [
    *TINY,
    "train.steps=200",
    "train.checkpoint_every=200",
    "train.resume_every=200",
    "evaluation.episodes=2",
    "evaluation.max_frames=120",
]


def reprodqn(tmp_path, command: str, game: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "reprodqn.cli", command, "--group", "deterministic"]
    argv += ["--run", "0", "--params", str(PARAMS), "--runs-dir", str(tmp_path / "runs")]
    if command == "evaluate":
        argv += ["--evaluations-dir", str(tmp_path / "ev"), "--workers", "1"]
    for item in [f"env.game={game}", *SMALL]:
        argv += ["--set", item]
    return subprocess.run(argv, capture_output=True, text=True, env=cli_env(), cwd=tmp_path)


def test_a_game_without_start_states_trains_and_evaluates_from_its_name_alone(tmp_path):
    trained = reprodqn(tmp_path, "train", "seaquest")
    assert trained.returncode == 0, trained.stderr
    said = [line for line in trained.stderr.splitlines() if "no start states" in line]
    assert said == [
        "train deterministic/0: evaluation.start_sequences: no start states for seaquest "
        "(none in the package, no start_sequences/seaquest.json here), so its evaluation "
        "starts each episode after 1..30 no-ops (not the paper's protocol; `reprodqn "
        "candidates`, `ranker` and `select` with --set env.game=seaquest make its own)"
    ]
    evaluated = reprodqn(tmp_path, "evaluate", "seaquest")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "from no-op starts" in evaluated.stderr
    record = json.loads((tmp_path / "ev" / "deterministic" / "0" / "eval.json").read_text())
    assert record["start_states"]["file"] == "none" and record["protocol"]["game"] == "seaquest"
