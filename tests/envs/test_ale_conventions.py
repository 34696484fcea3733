"""What an ale-py or SB3 user brings to reprodqn's env (issue 72, item 3): ale-py's argument
names accepted where they mean the same thing and refused in one line naming reprodqn's way
otherwise (each was a raw TypeError); sticky actions off by default said once at make, as
ALE v5's default is 0.25; `lives` in `info` in eval mode as in train mode."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

from reprodqn import envs
from reprodqn.core.errors import InputError

BREAKOUT = envs.env_id("breakout")


def test_ale_pys_names_for_the_same_thing_are_accepted():
    made = gym.make(BREAKOUT, frameskip=3, repeat_action_probability=0.25, full_action_space=False)
    ours = gym.make(BREAKOUT, sticky_p=0.25, env_config={"frame_skip": 3})
    assert made.unwrapped.config == ours.unwrapped.config
    assert made.unwrapped.config.sticky_p == 0.25 and made.unwrapped.config.frame_skip == 3


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"obs_type": "rgb"}, "obs_type='rgb': not offered; the observation is the authors' "),
        ({"full_action_space": True}, "full_action_space=True: not offered; reprodqn plays the "),
        ({"frameskip": (2, 5)}, "frameskip=(2, 5): reprodqn takes a fixed number here (frame_"),
        ({"max_episode_steps_x": 1}, "max_episode_steps_x: not an argument of reprodqn's env ("),
        ({"sticky_p": 0.1, "repeat_action_probability": 0.25}, "the same thing, given twice"),
    ],
)
def test_ale_pys_other_arguments_are_one_line_naming_reprodqns_way(given, said):
    with pytest.raises(InputError) as refused:
        gym.make(BREAKOUT, **given)
    assert str(refused.value).startswith(said) or said in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_sticky_default_is_said_once_at_make(monkeypatch):
    monkeypatch.setattr(envs.atari, "_STICKY_SAID", set())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(2):
            gym.make(BREAKOUT)
        gym.make(envs.env_id("pong"), sticky_p=0)  # chosen: quiet
        gym.make(envs.env_id("pong"), repeat_action_probability=0.25)
    (warning,) = [w for w in said if "sticky" in str(w.message)]
    assert str(warning.message) == (
        "reprodqn/Breakout-v0: sticky actions off (sticky_p=0, the paper's setting); ALE's "
        "ALE/Breakout-v5 repeats an action with probability 0.25: pass sticky_p=0.25 for "
        "that, or sticky_p=0 to say you chose it"
    )


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_lives_are_in_info_in_every_mode(mode):
    env = gym.make(BREAKOUT, mode=mode, sticky_p=0)
    _, info = env.reset(seed=0)
    assert info["lives"] == 5
    *_, info = env.step(1)
    assert info["lives"] == 5
