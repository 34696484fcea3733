"""The emulator follows the paper's code: preprocessing, sticky actions from the sticky
stream, no-op starts from the noop stream, life loss, exact state round-trip."""

from __future__ import annotations

import numpy as np
import pytest

from reprodqn.config.params import load_params
from reprodqn.determinism.rng import AuthorsStream
from reprodqn.training.atari import FIRE, NOOP, Emulator, FrameHistory, TrainingEnv, preprocess
from tests.helpers import PARAMS

RIGHT, LEFT = 3, 4


def env_config(**changes):
    return load_params(PARAMS).env.model_copy(update=changes)


def test_minimal_action_set_is_noop_fire_right_left():
    assert Emulator("breakout", 0.0, None, 84).action_set == (NOOP, FIRE, RIGHT, LEFT)


def test_preprocessing_max_pools_rgb_before_grayscale():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (210, 160, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (210, 160, 3), dtype=np.uint8)
    frame = preprocess(np.stack([a, b]), 84)
    assert frame.shape == (84, 84) and frame.dtype == np.uint8
    pooled = np.maximum(a, b)
    assert np.array_equal(frame, preprocess(np.stack([pooled, pooled]), 84))
    assert np.array_equal(frame, preprocess(np.stack([b, a]), 84))
    # a uniform colour maps to its luma (0.299 R + 0.587 G + 0.114 B)
    flat = np.zeros((2, 210, 160, 3), np.uint8)
    flat[..., 0] = 200
    assert np.all(preprocess(flat, 84) == round(0.299 * 200))


def play(emulator: Emulator, actions) -> tuple[list[int], np.ndarray]:
    rewards = [emulator.repeat(a, 4) for a in actions]
    return rewards, emulator.observe()


def scripted_actions(n: int) -> list[int]:
    return [FIRE if i % 25 == 0 else (RIGHT if (i // 15) % 2 else LEFT) for i in range(n)]


def test_sticky_actions_come_from_the_sticky_stream_only():
    actions = scripted_actions(300)

    def trajectory(emulator):
        frames = []
        for action in actions:
            emulator.repeat(action, 4)
            frames.append(emulator.observe())
        return np.stack(frames)

    def run(seed):
        rng = AuthorsStream(seed)
        return trajectory(Emulator("breakout", 0.25, rng, 84)), rng

    same_a, rng_a = run(1)
    same_b, _ = run(1)
    other, _ = run(2)
    plain = trajectory(Emulator("breakout", 0.0, None, 84))
    assert np.array_equal(same_a, same_b)
    assert not np.array_equal(same_a, other)
    assert not np.array_equal(same_a, plain)
    # one draw per emulator frame: 300 steps x 4 frames
    replayed = AuthorsStream(1)
    [replayed.uniform() for _ in range(1200)]
    assert rng_a.uniform() == replayed.uniform()


def test_no_op_starts_draw_once_from_the_noop_stream_and_life_loss_ends_the_episode():
    noop_rng = AuthorsStream(5)
    env = TrainingEnv(env_config(), None, noop_rng)
    env.begin_episode()
    expected = np.random.RandomState(5)
    assert env.emulator.ale.getEpisodeFrameNumber() == expected.randint(1, 31)
    assert noop_rng.uniform() == expected.uniform(0, 1)

    env = TrainingEnv(env_config(), None, AuthorsStream(5))
    env.begin_episode()
    lives = env.lives
    for _ in range(2000):  # never move: the ball is lost quickly
        _, _, terminal, truncated, game_over = env.step(1)  # FIRE
        if terminal:
            break
    assert terminal and not truncated and not game_over
    assert env.emulator.lives() == lives - 1  # the game went on; only the episode ended
    env.begin_episode()
    assert env.lives == lives - 1


def test_a_long_episode_is_truncated_not_terminated():
    env = TrainingEnv(env_config(max_episode_frames=40), None, AuthorsStream(0))
    env.begin_episode()
    flags = [env.step(0)[2:4] for _ in range(10)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])


def test_emulator_state_restores_into_a_fresh_emulator():
    rng = AuthorsStream(3)
    first = Emulator("breakout", 0.25, rng, 84)
    play(first, scripted_actions(120))
    saved, saved_rng = first.get_state(), rng.get_state()
    expected = play(first, scripted_actions(200))

    rng2 = AuthorsStream(0)
    rng2.set_state(saved_rng)
    second = Emulator("breakout", 0.25, rng2, 84)
    second.set_state(saved)
    rewards, frame = play(second, scripted_actions(200))
    assert rewards == expected[0] and np.array_equal(frame, expected[1])


def test_frame_history_pads_with_zeros_at_episode_start():
    history = FrameHistory(4, 2)
    history.push(np.full((2, 2), 9, np.uint8))
    history.reset(np.full((2, 2), 1, np.uint8))
    history.push(np.full((2, 2), 2, np.uint8))
    assert history.frames[:, 0, 0].tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("sticky_p", [0.0, 0.25])
def test_same_streams_same_game(sticky_p):
    def run():
        env = TrainingEnv(env_config(sticky_p=sticky_p), AuthorsStream(4), AuthorsStream(4))
        frames = [env.begin_episode()]
        frames += [env.step(a % 4)[0] for a in range(150)]
        return np.stack(frames)

    assert np.array_equal(run(), run())


@pytest.mark.parametrize("frames", [1, 2, 4])
def test_fast_and_sticky_paths_of_repeat_agree_when_nothing_sticks(frames):
    """With p = 0 the sticky path draws nothing that matters; both paths must play alike."""
    fast = Emulator("breakout", 0.0, None, 84)
    slow = Emulator("breakout", 1e-300, AuthorsStream(0), 84)  # never sticks
    for action in scripted_actions(60):
        assert fast.repeat(action, frames) == slow.repeat(action, frames)
        assert np.array_equal(fast.observe(), slow.observe())
    assert fast.ale.getEpisodeFrameNumber() == slow.ale.getEpisodeFrameNumber() == 60 * frames


@pytest.mark.parametrize("survives", [True, False])
def test_the_previous_action_survives_a_new_game_only_when_configured(survives):
    """The authors' wrapper keeps prev_action over reset_game (ale_wrapper.py), so the first
    frames of a new training game can repeat the last game's action."""
    emulator = Emulator("breakout", 0.9, AuthorsStream(7), 84, sticky_survives_reset=survives)
    play(emulator, [FIRE] + [RIGHT] * 30)
    emulator.reset_game()
    assert emulator.prev_action == (RIGHT if survives else NOOP)
    fresh = Emulator("breakout", 0.0, None, 84)
    fresh.reset_game()
    moved = not np.array_equal(play(emulator, [NOOP] * 10)[1], play(fresh, [NOOP] * 10)[1])
    assert moved == survives  # RIGHT repeated by the sticky draws moves the paddle
