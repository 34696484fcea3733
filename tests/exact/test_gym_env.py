"""exact.GymEnv: a Gymnasium env in a resume point, wrappers and all, without a private
attribute in the script; what it cannot capture is refused in one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from reprodqn import exact
from reprodqn.core.errors import InputError


def _cartpole():
    env = gym.make("CartPole-v1", max_episode_steps=30)  # TimeLimit, OrderEnforcing, checker
    return gym.wrappers.NormalizeReward(gym.wrappers.RecordEpisodeStatistics(env))


def _play(env, steps: int) -> list:
    """Actions from the env's own action space; episodes restart from the env's generator."""
    seen = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        episode = info.get("episode")
        seen.append((obs.tobytes(), float(reward), episode and (episode["r"], episode["l"])))
        if terminated or truncated:
            seen.append(env.reset()[0].tobytes())
    return seen


def test_cartpole_resumes_exactly_with_its_wrappers_counters_and_generators(tmp_path):
    env = _cartpole()
    env.reset(seed=3)
    env.action_space.seed(5)
    _play(env, 45)  # past an episode's end and into the next, mid-episode
    exact.save_resume_point(tmp_path, 45, {"env": exact.GymEnv(env)})
    expected = _play(env, 80)
    again = _cartpole()  # a new process's env: never reset
    exact.load_resume_point(tmp_path, {"env": exact.GymEnv(again)})
    assert _play(again, 80) == expected
    assert any(item[2] for item in expected if isinstance(item, tuple))  # episodes ended


@pytest.mark.parametrize("game", ["ALE/Pong-v5"])
def test_an_atari_game_resumes_exactly_through_ales_state(tmp_path, game):
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(game, repeat_action_probability=0.25)  # sticky actions: ALE's own RNG
    env.reset(seed=1)
    env.action_space.seed(2)
    _play(env, 30)
    exact.save_resume_point(tmp_path, 30, {"env": exact.GymEnv(env)})
    expected = _play(env, 60)
    again = gym.make(game, repeat_action_probability=0.25)
    again.reset(seed=99)  # another game in progress: all of it is replaced
    exact.load_resume_point(tmp_path, {"env": exact.GymEnv(again)})
    assert _play(again, 60) == expected


class Counting(gym.Wrapper):
    """A wrapper with a counter of its own that the adapter cannot see."""

    def step(self, action):
        self.steps = getattr(self, "steps", 0) + 1
        return self.env.step(action)


class Plain(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)


@pytest.mark.parametrize(
    "env, named",
    [
        (Counting(gym.make("CartPole-v1")), "the wrapper Counting (tests.exact.test_gym_env)"),
        (Plain(), "the env Plain (tests.exact.test_gym_env)"),
        (gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")]), "the env SyncVectorEnv"),
    ],
)
def test_an_env_it_cannot_capture_is_refused_in_one_line(env, named):
    with pytest.raises(InputError, match=r"^GymEnv: ") as refused:
        exact.GymEnv(env)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_another_env_at_loading_is_refused(tmp_path):
    exact.save_resume_point(tmp_path, 1, {"env": exact.GymEnv(gym.make("CartPole-v1"))})
    with pytest.raises(InputError, match=r"holds the env \['TimeLimit'"):
        exact.load_resume_point(tmp_path, {"env": exact.GymEnv(gym.make("MountainCar-v0").env)})
    assert np.__name__  # numpy is imported for the envs' arrays
