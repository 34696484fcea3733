"""A new game's start states in three commands (issue 72, item 2): `reprodqn candidates`,
`ranker` and `select` with --set env.game=GAME write the game's own
start_sequences/GAME.json, byte-identical in a second workspace and from the light install
(no DVC), recording the ranker's steps and chain; `--set env.game=GAME` then plays it. A
ranker folder holding a finished ranker of another game or other params is kept unless
--restart, and a game's file with other states unless --replace."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprodqn.cli.main import main
from tests.helpers import TINY, cli_env

GAME = "seaquest"
SMALL = [
    *TINY,
    "start_states.candidates=24",
    "start_states.top_k=8",
    "start_states.selected=4",
    "evaluation.episodes=4",
    "ranker.steps=400",
]


def sets(*items: str, game: str = GAME) -> list[str]:
    return [arg for item in [*SMALL, f"env.game={game}", *items] for arg in ("--set", item)]


def reprodqn(workspace: Path, command: str, *argv: str) -> tuple[int, str]:
    """One command in this process, in `workspace`: its exit code and what it said. The
    floor's knobs as the CLI sets them, so that it applies the floor where another test
    module imported torch first, instead of refusing a late one (as tests/evaluation/
    test_wording.py does); restored after."""
    from reprodqn.determinism import isa

    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for knob, value in {**isa.FLOORS["portable"], "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}.items():
            patch.setenv(knob, value)
        patch.chdir(workspace)
        patch.setattr(sys, "stderr", said)
        code = main([command, *argv])
    return code, said.getvalue()


def init(root: Path) -> Path:
    root.mkdir(parents=True)
    code, said = reprodqn(root, "init", ".")
    assert code == 0, said
    return root


def three_commands(root: Path) -> Path:
    init(root)
    for command in ("candidates", "ranker", "select"):
        code, said = reprodqn(root, command, *sets())
        assert code == 0, said
    return root


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory):
    base = tmp_path_factory.mktemp("new-game")
    return three_commands(base / "a"), three_commands(base / "b")


def test_three_commands_make_a_games_own_file_twice_byte_identical(workspaces):
    a, b = workspaces
    made = a / "start_sequences" / f"{GAME}.json"
    assert made.read_bytes() == (b / "start_sequences" / f"{GAME}.json").read_bytes()
    doc = json.loads(made.read_text())
    assert doc["game"] == GAME and doc["count"] == 4
    provenance = doc["provenance"]
    ranker = provenance["ranker"]  # how long it trained, on what, and its chain
    assert ranker["game"] == GAME and ranker["steps"] == ranker["checkpoint_step"] == 400
    chain = [json.loads(line) for line in (a / f"ranker-{GAME}/run/hashes.jsonl").open()]
    assert ranker["chain"] == chain and [line["step"] for line in chain] == [0, 200, 400]
    assert provenance["ranker_weights_sha256"] == chain[-1]["weights_sha256"]
    assert ranker["run_config"]["config"]["train"]["steps"] == 400
    assert provenance["candidates_seed"] == 123
    # the game's own files; Breakout's (the DVC stages') untouched
    assert (a / "start_sequences" / f"{GAME}-candidates.json").is_file()
    assert (a / "start_sequences" / f"{GAME}-ranking.csv").is_file()
    assert not (a / "ranker").exists() and not (a / "start_sequences" / "selected.json").exists()


def test_the_games_file_is_what_its_training_and_evaluation_play(workspaces, monkeypatch):
    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.evaluation import start_states
    from reprodqn.evaluation.stage import protocol_episodes

    a, _ = workspaces
    monkeypatch.chdir(a)
    params = load_params(a / "params.yaml", [*SMALL, f"env.game={GAME}"])
    config = resolve_run(params, "deterministic", 0)
    assert start_states.check_before_training(params.evaluation, [config]) == []  # no no-ops
    *_, used = protocol_episodes(config, params.evaluation, None)
    assert used["file"] == f"start_sequences/{GAME}.json" and used["count"] == 4
    # the gym env made in the workspace plays it too, with no word of no-op starts
    import warnings

    import gymnasium as gym

    from reprodqn import envs

    monkeypatch.setattr(envs.atari, "_NOOP_STARTS_SAID", set())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        env = gym.make(envs.env_id(GAME), mode="eval")
    assert not [w for w in said if "start states" in str(w.message)]
    assert env.unwrapped.start_sequences == f"start_sequences/{GAME}.json"


def test_which_says_what_evaluation_plays_and_records_it(workspaces, tmp_path, capsys):
    """`reprodqn start-states which`: the workspace's own file once select made it, no-op
    starts where there is none; --out writes the record the evaluate stage depends on."""
    a, _ = workspaces
    code, said = reprodqn(a, "start-states", "which", *sets(), "--out", "played.json")
    assert code == 0, said
    made = json.loads((a / "start_sequences" / f"{GAME}.json").read_text())
    record = json.loads((a / "played.json").read_text())
    assert record == {
        "game": GAME,
        "start_sequences": f"start_sequences/{GAME}.json",
        "from": "workspace",
        "count": 4,
        "sequences_sha256": made["sequences_sha256"],
    }
    assert f"the workspace's: 4 sequences, sha256 {made['sequences_sha256'][:12]}" in (
        capsys.readouterr().out
    )
    code, said = reprodqn(tmp_path, "start-states", "which", *sets())  # no workspace here
    assert code == 0, said
    assert f"{GAME} evaluates on none: no-op starts" in capsys.readouterr().out


def test_a_finished_ranker_is_replaced_only_with_restart(workspaces, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(workspaces[0], ws)
    folder = ws / f"ranker-{GAME}"
    before = (folder / "ranker.json").read_bytes()
    code, said = reprodqn(ws, "ranker", *sets("ranker.steps=600"))
    assert code == 2 and said.count("\n") == 1, said
    assert f"ranker-{GAME}: holds the finished ranker of {GAME} (trained with params " in said
    assert "train.steps (now 600, recorded 400)" in said
    assert "rerun with --restart to discard it" in said
    code, said = reprodqn(ws, "ranker", "--out", folder.name, *sets(game="pong"))
    assert code == 2 and "rerun with --restart" in said
    assert f"of {GAME} (trained with" in said and "not of pong (trained with" in said
    assert (folder / "ranker.json").read_bytes() == before and not (ws / "ranker-pong").exists()
    # with --restart: replaced (here by adopting its own step-200 checkpoint: no training)
    adopted = folder / "run" / "checkpoints" / "step-000000200.safetensors"
    code, said = reprodqn(ws, "ranker", "--restart", *sets(f"ranker.checkpoint={adopted}"))
    assert code == 0, said
    record = json.loads((folder / "ranker.json").read_text())
    assert record["source"] == str(adopted) and record["checkpoint_step"] == 200
    assert [line["step"] for line in record["chain"]] == [0, 200]  # its run's, to step 200


def test_select_keeps_a_games_file_with_other_states_unless_replace(workspaces, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(workspaces[0], ws)
    made = ws / "start_sequences" / f"{GAME}.json"
    before = made.read_bytes()
    code, said = reprodqn(ws, "select", *sets("start_states.selection_seed=7"))
    assert code == 2 and said.count("\n") == 1
    assert f"{GAME}.json: exists with other contents" in said and "--replace it" in said
    assert made.read_bytes() == before
    code, said = reprodqn(ws, "select", "--replace", *sets("start_states.selection_seed=7"))
    assert code == 0, said
    assert json.loads(made.read_text())["provenance"]["selection_seed"] == 7


def test_select_names_the_command_a_missing_file_needs(tmp_path):
    code, said = reprodqn(init(tmp_path / "ws"), "select", *sets(game="pong"))
    assert code == 2 and said == (
        "reprodqn: error: start_sequences/pong-candidates.json: not made yet; run "
        "`reprodqn candidates --set env.game=pong` first\n"
    )


# as in an install without the study extra (tests/test_light_install.py): no DVC, no MLflow
LIGHT = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("dvc", "mlflow", "scipy", "matplotlib", "submitit"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from reprodqn.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_light_install_makes_the_same_file_twice_with_the_three_commands(tmp_path):
    """The documented commands, each a process of its own, with no study extra, in two
    workspaces."""

    def light(where: Path, *argv: str) -> None:
        done = subprocess.run(
            [sys.executable, "-c", LIGHT, *argv],
            cwd=where,
            env=cli_env(),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr

    made = []
    for name in ("a", "b"):
        light(tmp_path, "init", name)
        for command in ("candidates", "ranker", "select"):
            light(tmp_path / name, command, *sets())
        made.append((tmp_path / name / "start_sequences" / f"{GAME}.json").read_bytes())
    assert made[0] == made[1]
    assert json.loads(made[0])["provenance"]["ranker"]["steps"] == 400
