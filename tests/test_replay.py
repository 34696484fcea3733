"""Replay stores one frame per step and rebuilds exactly the stacks the agent saw, never
across an episode start or the write cursor, including truncated episodes and wraparound."""

from __future__ import annotations

import numpy as np
import pytest

from reprodqn.atari import FrameHistory
from reprodqn.replay import ReplayMemory


def label(n: int) -> np.ndarray:
    """A 2x2 uint8 frame that encodes n (unique up to 2**32)."""
    return np.frombuffer(np.uint32(n).tobytes(), np.uint8).reshape(2, 2).copy()


def simulate(capacity: int, steps: int, seed: int):
    """Drive replay as the trainer does; record every state the agent acted on."""
    rng = np.random.default_rng(seed)
    replay = ReplayMemory(capacity, 4, 2)
    history = FrameHistory(4, 2)
    counter = 1
    history.reset(label(counter))
    first = True
    seen = {}  # slot -> [state, next state (None after a terminal), terminal]
    for _ in range(steps):
        counter += 1
        frame = label(counter)
        ending = rng.random()
        terminal, truncated = ending < 0.08, 0.08 <= ending < 0.12
        slot = replay.cursor
        replay.add(history.frames[-1], int(rng.integers(4)), 1.0, terminal, first)
        seen[slot] = [history.frames.copy(), None, terminal]
        if truncated:
            final_slot = replay.cursor
            replay.add_final(frame)
            history.push(frame)
            seen[slot][1] = history.frames.copy()
            seen.pop(final_slot, None)
        if terminal or truncated:
            counter += 1
            history.reset(label(counter))
            first = True
        else:
            history.push(frame)
            seen[slot][1] = history.frames.copy()
            first = False
    return replay, seen


@pytest.mark.parametrize("capacity, steps", [(500, 300), (64, 1000), (37, 211)])
def test_sampled_stacks_are_the_states_the_agent_saw(capacity, steps):
    replay, seen = simulate(capacity, steps, seed=capacity)
    indices = np.arange(replay.size)
    valid = replay.valid(indices)
    assert valid.sum() > 0.5 * replay.size
    states = replay.stacks(indices[valid])
    nexts = replay.stacks((indices[valid] + 1) % capacity)
    for k, slot in enumerate(indices[valid]):
        state, next_state, terminal = seen[slot]
        assert np.array_equal(states[k], state)
        assert replay.terminals[slot] == terminal
        if not terminal:
            assert np.array_equal(nexts[k], next_state)
    batch = replay.sample(64, np.random.default_rng(0))
    for k, slot in enumerate(batch["indices"]):
        state, next_state, terminal = seen[slot]
        assert np.array_equal(batch["states"][k], state) and batch["terminals"][k] == terminal
        if not terminal:
            assert np.array_equal(batch["next_states"][k], next_state)


def test_invalid_slots_are_those_that_would_cross_the_cursor_or_lack_a_next_frame():
    replay, seen = simulate(64, 1000, seed=1)
    newest = (replay.cursor - 1) % 64
    assert not replay.valid(np.array([newest]))[0]
    # a slot right at the oldest end needs frames already overwritten unless it starts an episode
    oldest = replay.cursor
    assert replay.valid(np.array([oldest]))[0] == (replay.depths[oldest] == 0
                                                   and replay.starts[oldest])
    # truncated episodes' final frames never start a transition
    finals = np.flatnonzero(~replay.starts[: replay.size])
    assert len(finals) > 0 and not replay.valid(finals).any()


def test_sampling_is_a_function_of_the_minibatch_stream():
    replay, _ = simulate(200, 400, seed=2)
    a = replay.sample(32, np.random.default_rng(9))
    b = replay.sample(32, np.random.default_rng(9))
    c = replay.sample(32, np.random.default_rng(10))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["indices"], c["indices"])
    assert replay.valid(a["indices"]).all()


def test_state_round_trip_continues_identically():
    replay, _ = simulate(64, 500, seed=3)
    state = replay.get_state()
    copy = ReplayMemory(64, 4, 2)
    copy.set_state({k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()})
    for memory in (replay, copy):
        memory.add(label(7), 1, 0.0, False, False)
    x = replay.sample(16, np.random.default_rng(1))
    y = copy.sample(16, np.random.default_rng(1))
    assert all(np.array_equal(x[k], y[k]) for k in x)


def test_one_frame_per_transition():
    replay = ReplayMemory(1000, 4, 84)
    per_transition = replay.nbytes / replay.capacity
    assert 84 * 84 <= per_transition <= 84 * 84 + 16
