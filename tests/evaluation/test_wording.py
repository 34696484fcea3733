"""Each door says what its user can do (issue 72, item 6): a Gymnasium user is told the
env's argument, not a params key; `select` is told how to select for its candidates' game;
a flag's bad value is named as the flag; no-op starts are not called "start sequences of
none". (The lock a refused `evaluate` left: tests/core/test_run_lock.py.)"""

from __future__ import annotations

import gymnasium as gym
import pytest

from reprodqn import envs
from reprodqn.cli.main import main
from reprodqn.config.params import load_params
from reprodqn.core.atomic import write_json
from reprodqn.core.errors import InputError
from reprodqn.evaluation import start_states
from tests.helpers import PARAMS

PONGS = "start_sequences/pong.json"


@pytest.fixture(autouse=True)
def floor_stated(monkeypatch):
    """The CLI in this process (torch already imported): the floor's knobs as it sets them,
    so it applies the floor instead of refusing a late one; restored after each test."""
    from reprodqn.determinism import isa

    for knob, value in {**isa.FLOORS["portable"], "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}.items():
        monkeypatch.setenv(knob, value)


@pytest.mark.parametrize(
    ("game", "remedy"),
    [
        ("breakout", "(leave start_sequences unset for the package's, start_sequences/authors"),
        ("seaquest", "(make seaquest's with `reprodqn candidates`, `ranker` and `select`"),
    ],
)
def test_an_env_given_another_games_states_is_told_its_own_arguments(game, remedy):
    with pytest.raises(InputError) as refused:
        gym.make(envs.env_id(game), mode="eval", start_sequences=PONGS)
    line = str(refused.value)
    assert f"start states of 'pong', but this env's game is '{game}' {remedy}" in line
    assert line.endswith(", or pass start_sequences='none')")
    assert "evaluation.start_sequences" not in line


def test_an_episode_past_the_end_of_no_op_starts_is_said_as_such():
    env = gym.make(envs.env_id("seaquest"), mode="eval", start_sequences="none")
    with pytest.raises(InputError) as refused:
        env.reset(options={"episode": 100})
    assert (
        str(refused.value) == "episode 100: expected 0 to 99 (the 100 episodes of its no-op starts)"
    )


def test_select_given_another_games_candidates_is_told_how_to_select_for_them(tmp_path, capsys):
    small = load_params(PARAMS).start_states.model_copy(update={"candidates": 20})
    write_json(tmp_path / "candidates.json", start_states.generate_candidates(small, "pong"))
    code = main(
        ["select", "--params", str(PARAMS), "--set", "start_states.candidates=20"]
        + ["--set", "start_states.top_k=20", "--set", "start_states.selected=20"]
        + ["--set", "evaluation.episodes=20", "--candidates", str(tmp_path / "candidates.json")]
        + ["--ranker", str(tmp_path / "none.safetensors"), "--out", str(tmp_path / "x.json")]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "candidates of 'pong', but env.game is 'breakout' (select for their game: " in err
    assert "--set env.game=pong; or `reprodqn candidates`)" in err
    assert "evaluation.start_sequences" not in err


def test_a_game_given_by_flag_is_named_as_the_flag(tmp_path, capsys):
    argv = ["evaluate-policy", str(tmp_path / "p.zip"), "--out-dir", str(tmp_path / "out")]
    assert main([*argv, "--params", str(PARAMS), "--game", "Seaquest"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reprodqn: error: --game Seaquest: env.game: ")
    assert "--set env.game" not in err
