"""A run knows its game: every command that plays or retrains a run (evaluate, resume-point,
trace) checks the run's game and action count against the game it is asked to play, in one
line naming both; `train` refuses another game's start states as `study train` does."""

from __future__ import annotations

import json

import pytest

from reprodqn.cli.main import main
from reprodqn.core import workspace
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.dqn.network import QNetwork
from tests.helpers import PARAMS, TINY


def fake_finished_run(runs, game: str, n_actions: int):
    """runs/deterministic/0 as a finished run of `game` records it: its config, its
    step-0 checkpoint with the network's action count, its chain, complete.json."""
    run_dir = workspace.run_dir(runs, "deterministic", 0)
    net = QNetwork("nips", n_actions, 4, 84)
    sha = save_weights(
        workspace.checkpoint_path(run_dir, 0),
        net.state_dict(),
        {"network": "nips", "n_actions": n_actions, "history_length": 4, "screen_size": 84},
    )
    (run_dir / workspace.RUN_CONFIG).write_text(
        json.dumps({"config": {"env": {"game": game}}, "digest": "d", "fingerprint": "f"})
    )
    (run_dir / workspace.HASHES).write_text(
        json.dumps({"step": 0, "weights_sha256": sha, "loss_chain_sha256": "l"}) + "\n"
    )
    (run_dir / workspace.COMPLETE).write_text("{}")
    return run_dir


@pytest.fixture(autouse=True)
def floor_stated(monkeypatch):
    """The CLI in this process (torch already imported): the floor's knobs as it sets them,
    so it applies the floor instead of refusing a late one; restored after each test."""
    from reprodqn.determinism import isa

    for knob, value in {**isa.FLOORS["portable"], "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}.items():
        monkeypatch.setenv(knob, value)


def cli(*argv: str) -> int:
    sets = [item for setting in TINY for item in ("--set", setting)]
    return main([*argv, "--params", str(PARAMS), *sets])


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ([], "trained on pong (6 actions), but asked to play breakout (4 actions)"),
        (
            ["--set", "env.game=ms_pacman", "--set", "evaluation.start_sequences=none"],
            "trained on pong (6 actions), but asked to play ms_pacman (9 actions)",
        ),
    ],
)
def test_evaluating_a_run_as_another_game_is_one_line_naming_both(
    tmp_path, capsys, asked, expected
):
    """A Pong run evaluated as Ms. Pac-Man wrote Ms. Pac-Man's scores; evaluated with the
    params' Breakout, it ended in an IndexError traceback."""
    fake_finished_run(tmp_path / "runs", "pong", 6)
    where = ["--runs-dir", str(tmp_path / "runs"), "--evaluations-dir", str(tmp_path / "ev")]
    code = cli("evaluate", "--group", "deterministic", "--run", "0", *where, *asked)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert expected in err and "--set env.game=pong" in err
    assert not (tmp_path / "ev").exists()  # not even a folder with a .lock (issue 72, item 6)


def test_resume_point_and_trace_check_the_runs_game(tmp_path, capsys):
    fake_finished_run(tmp_path / "runs", "pong", 6)
    runs = ["--runs-dir", str(tmp_path / "runs")]
    commands = [
        ["resume-point", "deterministic/0", "--step", "200", *runs, "--out-dir", str(tmp_path)],
        ["trace", "--group", "deterministic", "--run", "0", "--from-resume", "0"]
        + ["--updates", "2", *runs, "--out", str(tmp_path / "t.jsonl")],
    ]
    for argv in commands:
        assert cli(*argv) == 2
        err = capsys.readouterr().err
        assert "trained on pong (6 actions), but asked to play breakout (4 actions)" in err
        assert err.count("\n") == 1


def test_a_network_of_another_action_count_is_refused_even_where_no_game_is_recorded(
    tmp_path,
):
    from reprodqn.core.errors import InputError
    from reprodqn.training.run_game import check_run_game

    run_dir = fake_finished_run(tmp_path, "breakout", 6)
    (run_dir / workspace.RUN_CONFIG).unlink()
    with pytest.raises(InputError, match="its network has 6 actions, but asked to play breakout"):
        check_run_game(run_dir, "breakout")
    check_run_game(fake_finished_run(tmp_path / "b", "breakout", 4), "breakout")


def test_train_refuses_another_games_start_states_before_training(tmp_path, capsys):
    """Plain `train` accepted Pong with Breakout's states; only evaluation refused them. (The
    default follows the game; another game's file named is refused.)"""
    code = cli(
        "train", "--group", "deterministic", "--run", "0", "--runs-dir", str(tmp_path),
        "--set", "env.game=seaquest",
        "--set", "evaluation.start_sequences=start_sequences/pong.json",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "start states of 'pong', but env.game is 'seaquest'" in err
    assert not any(tmp_path.iterdir())


def test_study_evaluate_refuses_a_run_of_another_game_before_any_job(tmp_path, capsys):
    fake_finished_run(tmp_path / "runs", "pong", 6)
    where = ["--runs-dir", str(tmp_path / "runs"), "--evaluations-dir", str(tmp_path / "ev")]
    assert cli("study", "evaluate", *where) == 2
    err = capsys.readouterr().err
    assert "trained on pong (6 actions), but asked to play breakout (4 actions)" in err
    assert err.count("\n") == 1 and not (tmp_path / "ev").exists()
