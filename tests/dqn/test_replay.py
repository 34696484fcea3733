"""Replay stores one frame per step, samples exactly the authors' valid set in their draw
order, and every state it returns is the state the agent acted on: 4 frames of one life."""

from __future__ import annotations

import numpy as np
import pytest

from reprodqn.determinism.rng import AuthorsStream
from reprodqn.dqn.replay import ReplayMemory
from reprodqn.training.atari import FrameHistory
from tests.helpers import label


def simulate(capacity: int, steps: int, seed: int, wraps: bool = True, long_lives=False):
    """Drive replay as the trainer does (terminals, and cuts that end an episode without a
    terminal, as the evaluation cut does); record each slot's state and next state."""
    rng = np.random.default_rng(seed)
    replay = ReplayMemory(capacity, 4, 2, episode_time_wraps=wraps)
    history = FrameHistory(4, 2)
    counter, episode_step = 1, 0
    history.reset(label(counter))
    seen = {}  # slot -> (state acted on, next state, ended by a cut)
    end_p = 0.002 if long_lives else 0.06
    for _ in range(steps):
        counter += 1
        frame = label(counter)
        ending = rng.random()
        terminal, cut = ending < end_p, end_p <= ending < end_p * 1.5
        slot = replay.cursor
        state = history.frames.copy()
        replay.add(frame, int(rng.integers(4)), 1.0, terminal, episode_step)
        history.push(frame)
        seen[slot] = (state, history.frames.copy(), cut)
        episode_step += 1
        if terminal or cut:
            counter += 1
            history.reset(label(counter))
            episode_step = 0
    return replay, seen


def authors_sample_minibatch(replay: ReplayMemory, size: int, random_state, batch: int):
    """repro_dqn dqn/replaybuffer.py sample_minibatch, re-stated (their code, our names)."""
    h, insert_loc = replay.history_length, replay.cursor
    indices = []
    while len(indices) < batch:
        i = random_state.randint(h, size - 1)
        if i >= insert_loc and i - h < insert_loc:  # "buffer wraparound"
            continue
        if replay.terminals[i - h : i].any():  # "sequences that overlap with episode ends"
            continue
        times = replay.episode_time[i - h : i]
        if not all(t < t2 for t, t2 in zip(times, times[1:], strict=False)):  # new episode
            continue
        indices.append(i)
    return indices


@pytest.mark.parametrize("capacity, steps", [(500, 300), (64, 1000), (37, 211), (900, 900)])
def test_indices_are_the_authors_draws_and_redraws(capacity, steps):
    replay, _ = simulate(capacity, steps, seed=capacity)
    for seed in range(5):
        ours = replay.sample_indices(32, AuthorsStream(seed))
        theirs = authors_sample_minibatch(replay, replay.size, np.random.RandomState(seed), 32)
        assert ours.tolist() == theirs


@pytest.mark.parametrize("capacity, steps", [(500, 300), (64, 1000), (37, 211)])
def test_sampled_states_are_four_real_frames_the_agent_acted_on(capacity, steps):
    replay, seen = simulate(capacity, steps, seed=capacity + 1)
    batch = replay.sample(256, AuthorsStream(0))
    times = replay.episode_time[batch["indices"]]
    assert ((times >= 4) | (times == 0)).all()  # no episode's first steps (0: the cut quirk)
    assert (batch["states"].reshape(256, 4, -1).any(axis=2)).all()  # no zero padding
    quirks = 0
    for k, slot in enumerate(batch["indices"]):
        state, next_state, _ = seen[slot]
        if replay.episode_time[slot] == 0:  # after a cut: their one cross-episode transition
            assert seen[(slot - 1) % capacity][2]
            quirks += 1
            continue
        assert np.array_equal(batch["states"][k], state)
        assert np.array_equal(batch["next_states"][k], next_state)
    assert quirks < 256 // 10


def test_windows_across_a_256_step_wrap_are_dropped_unless_configured_otherwise():
    wrapped, _ = simulate(2000, 1500, seed=3, long_lives=True)
    exact, _ = simulate(2000, 1500, seed=3, wraps=False, long_lives=True)
    lengths = np.flatnonzero(exact.episode_time[: exact.size] == 255)
    assert len(lengths) > 0  # an episode reached step 255 (and 256)
    dropped = [i for i in range(4, wrapped.size - 1) if not wrapped.valid(i) and exact.valid(i)]
    assert dropped and all(wrapped.episode_time[i - 4 : i].tolist().count(0) == 1 for i in dropped)
    assert all(exact.valid(i) for i in dropped)
    assert all(
        not exact.valid(i) or wrapped.valid(i) or i in dropped for i in range(4, wrapped.size - 1)
    )


def test_state_round_trip_continues_identically():
    replay, _ = simulate(64, 500, seed=3)
    state = replay.get_state()
    copy = ReplayMemory(64, 4, 2)
    copy.set_state({k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()})
    for memory in (replay, copy):
        memory.add(label(7), 1, 0.0, False, 9)
    x = replay.sample(16, AuthorsStream(1))
    y = copy.sample(16, AuthorsStream(1))
    assert all(np.array_equal(x[k], y[k]) for k in x)


def test_too_few_transitions_to_sample_is_an_error_not_a_hang():
    replay = ReplayMemory(64, 4, 2)
    for t in range(5):
        replay.add(label(t), 0, 0.0, False, t)
    with pytest.raises(ValueError, match="holds 5 transitions; sampling needs at least 6"):
        replay.sample(1, AuthorsStream(0))


def test_one_frame_per_transition():
    replay = ReplayMemory(1000, 4, 84)
    per_transition = replay.nbytes / replay.capacity
    assert 84 * 84 <= per_transition <= 84 * 84 + 16
