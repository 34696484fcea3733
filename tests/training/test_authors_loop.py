"""With seeds.generator = authors, the first 2,000 steps make the authors' decisions: the same
actions (epsilon-greedy draws, no-ops, sticky repeats, episode ends, the evaluation cut) and
the same minibatch indices as repro_dqn's loop, re-stated below from its code (59b8dfb).

Greedy actions come from a fixed stand-in policy shared by both sides: the network is not
what is compared here, the draws and the bookkeeping around them are."""

from __future__ import annotations

from collections import deque

import cv2
import numpy as np
import pytest
import torch
from ale_py import ALEInterface, roms

from reprodqn.config.params import load_params, resolve_run
from reprodqn.training.loop import Run
from tests.helpers import PARAMS

STEPS = 2000
SETTINGS = [
    "agent.network=nips",
    "agent.batch_size=8",
    "agent.epsilon_decay_steps=1000",
    "replay.capacity=1500",
    "replay.learning_starts=500",
    "train.steps=2000",
    "train.checkpoint_every=1000",
    "seeds.exploration=125",
    "seeds.minibatch=127",
    "seeds.noop=129",
    "seeds.sticky=131",
]


def stand_in_greedy(state: np.ndarray) -> int:
    return int(state.astype(np.int64).sum()) % 4


def authors_loop(steps, p, sticky_p):
    """dqn/train.py's loop with ale_wrapper.py, preprocess.py, utils.perform_no_ops and
    replaybuffer.sample_minibatch, restated with their generators and draw calls."""
    s, a, r = p.seeds, p.agent, p.replay
    rnd_exp, rnd_no_op = np.random.RandomState(s.exploration), np.random.RandomState(s.noop)
    rnd_sample, rnd_repeat = np.random.RandomState(s.minibatch), np.random.RandomState(s.sticky)
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("breakout"))
    action_set = [int(x.value) for x in ale.getMinimalActionSet()]
    previous = [0]  # ALEInterfaceWrapper.prev_action: survives reset_game

    def act(action):
        if sticky_p > 0 and rnd_repeat.uniform(0, 1) < sticky_p:
            action = previous[0]
        previous[0] = action
        return ale.act(action)

    def frame(pre):  # Preprocessor.preprocess: max of two RGB screens, gray, cv2 default
        return cv2.resize(cv2.cvtColor(np.maximum(pre[0], pre[1]), cv2.COLOR_RGB2GRAY), (84, 84))

    terminals, times = np.zeros(r.capacity, bool), np.zeros(r.capacity, np.uint8)
    size = insert = 0
    epsilon, delta = a.epsilon_start, (a.epsilon_start - a.epsilon_final) / a.epsilon_decay_steps
    actions, indices, timestep = [], [], 0
    while timestep < steps:
        state, pre = deque([np.zeros((84, 84), np.uint8)] * 4, 4), deque([], 2)
        for _ in range(rnd_no_op.randint(1, p.env.noop_max + 1)):  # perform_no_ops
            act(0)
            pre.append(ale.getScreenRGB())
        if len(pre) < 2:
            act(0)
            pre.append(ale.getScreenRGB())
        state.append(frame(pre))
        lives, done, time_since_term = ale.lives(), False, 0
        while not done and timestep < steps:
            if rnd_exp.uniform(0, 1) < epsilon:  # eGreedy_action
                index = rnd_exp.randint(len(action_set))
            else:
                index = stand_in_greedy(np.stack(state))
            actions.append(index)
            for _ in range(4):
                act(action_set[index])
                pre.append(ale.getScreenRGB())
            state.append(frame(pre))
            done = ale.game_over() or ale.lives() < lives
            terminals[insert], times[insert] = done, time_since_term % 256  # add_item
            size, insert = max(size, insert + 1), (insert + 1) % r.capacity
            if timestep > r.learning_starts:
                epsilon = max(epsilon - delta, a.epsilon_final)
                if timestep % p.train.checkpoint_every == 0:  # evaluator.evaluate, then:
                    ale.reset_game()
                    done = True
                if timestep % a.update_every == 0:  # agent.train -> sample_minibatch
                    batch = []
                    while len(batch) < a.batch_size:
                        i = rnd_sample.randint(4, size - 1)
                        if i >= insert and i - 4 < insert:
                            continue
                        if terminals[i - 4 : i].any():
                            continue
                        if not all(t < t2 for t, t2 in zip(times[i - 4 : i], times[i - 3 : i])):  # noqa: B905
                            continue
                        batch.append(i)
                    indices.append(batch)
            timestep += 1
            time_since_term += 1
        if ale.game_over():
            ale.reset_game()
    return actions, indices


def ours(params, sticky_p, tmp_path, monkeypatch):
    run = Run(resolve_run(params, "deterministic", 0), tmp_path, torch.device("cpu"))
    monkeypatch.setattr(run.agent, "greedy_action", stand_in_greedy)
    actions, indices = [], []
    act, sample = run.agent.act, run.replay.sample_indices
    monkeypatch.setattr(run.agent, "act", lambda s, rng: actions.append(act(s, rng)) or actions[-1])
    monkeypatch.setattr(
        run.replay,
        "sample_indices",
        lambda n, rng: indices.append(sample(n, rng).tolist()) or np.array(indices[-1]),
    )
    while run.step < STEPS:
        run.advance()
    return actions, indices


@pytest.mark.parametrize("sticky_p", [0.0, 0.25])
def test_first_2000_steps_make_the_authors_decisions(sticky_p, tmp_path, monkeypatch):
    params = load_params(PARAMS, [*SETTINGS, f"env.sticky_p={sticky_p}"])
    assert params.seeds.generator == "authors"  # the default
    expected_actions, expected_indices = authors_loop(STEPS, params, sticky_p)
    actions, indices = ours(params, sticky_p, tmp_path, monkeypatch)
    assert len(indices) == len(expected_indices) == (1996 - 504) // 4 + 1
    assert actions == expected_actions
    assert indices == expected_indices
    assert len(set(actions[1500:])) > 1 and min(min(b) for b in indices) >= 4
