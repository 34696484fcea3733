"""The SB3 recipe docs/agents.md shows (examples/sb3_breakout.py, included by the page, so
it is the code tested here): it learns and scores at a tiny scale, what SB3 logs is each
whole game's raw score (not a life's clipped reward), and SB3's AtariWrapper is not for
this env, as the page says."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.monitor import Monitor

from tests.helpers import ROOT

SCRIPT = ROOT / "examples" / "sb3_breakout.py"


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("sb3_breakout", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_shows_the_tested_recipe():
    page = (ROOT / "docs" / "agents.md").read_text()
    assert '--8<-- "examples/sb3_breakout.py:recipe"' in page
    text = SCRIPT.read_text()
    assert "# --8<-- [start:recipe]" in text and "# --8<-- [end:recipe]" in text


def test_the_recipe_learns_and_scores_at_a_tiny_scale(recipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "log"))  # SB3's own is a new /tmp folder
    # a dozen updates (a CPU's seconds), exploring throughout so that games end
    dqn = {"buffer_size": 1_000, "learning_starts": 550, "exploration_fraction": 1.0}
    model = recipe.train(600, device="cpu", **dqn)
    env = model.get_env().envs[0]  # SB3 played the recipe's wrappers, and no Monitor of its own
    assert isinstance(env, recipe.GameScore) and isinstance(env.env, Monitor)
    assert not isinstance(env.env.env, Monitor)
    games = list(model.ep_info_buffer)
    assert games and all(set(game) == {"r", "l", "t"} for game in games)
    assert sum(game["l"] for game in games) <= 600
    scores, lengths = recipe.score(model, episodes=2, max_frames=400)
    assert len(scores) == len(lengths) == 2
    model.save(tmp_path / "dqn.zip")
    assert (tmp_path / "dqn.zip").is_file()


def play(env: gym.Env, steps: int) -> list[dict]:
    """Random actions from one seed, reset as SB3's vector env resets; the "episode" entries
    the env's info gave."""
    rng, found = np.random.default_rng(0), []
    env.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if "episode" in info:
            found.append(info["episode"])
        if terminated or truncated:
            env.reset()
    return found


def test_what_sb3_logs_is_each_whole_games_raw_score(recipe):
    def make():
        return gym.make("reprodqn/Breakout-v0", mode="train", reward_clip=1.0, sticky_p=0)

    steps = 700  # four games of Breakout from seed 0
    games, lives = play(recipe.GameScore(Monitor(make())), steps), play(Monitor(make()), steps)
    # the same play, unwrapped: raw points summed to each game over
    env, rng, truth, score, length = make(), np.random.default_rng(0), [], 0.0, 0
    env.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        score, length = score + info["raw_reward"], length + 1
        if info["game_over"] or truncated:
            truth.append((score, length))
            score, length = 0.0, 0
        if terminated or truncated:
            env.reset()
    assert len(truth) >= 2
    assert [(game["r"], game["l"]) for game in games] == truth
    assert len(lives) > len(games)  # Monitor alone: an entry per life (5 a game in Breakout)


def test_sb3s_atari_wrapper_is_not_for_this_env():
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    wrapped = AtariWrapper(gym.make("reprodqn/Breakout-v0", sticky_p=0))
    with pytest.raises(AttributeError, match="ale"):
        wrapped.reset(seed=0)
