"""The agent's optimizer is torch's RMSprop bit for bit, and acting draws as the authors did."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from reprodqn.agent import DQNAgent, RMSprop, exact_sqrt_floor
from reprodqn.config import load_params

from .conftest import PARAMS


@pytest.mark.parametrize("eps", [0.01, 1e-6])  # the paper's value and the 2018 code's
def test_rmsprop_matches_torch_bit_for_bit_with_zero_square_averages(eps):
    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 4))
    reference = copy.deepcopy(model)
    ours = RMSprop(model.parameters(), lr=2.5e-4, alpha=0.95, eps=eps)
    theirs = torch.optim.RMSprop(reference.parameters(), lr=2.5e-4, alpha=0.95, eps=eps,
                                 foreach=False)
    for step in range(40):
        x = torch.randn(32, 64, generator=generator) * (1e-12 if step % 7 == 0 else 1.0)
        x[:, :16] = 0  # dead inputs: rows of exact-zero gradients, as dead ReLUs give
        for net, optimizer in ((model, ours), (reference, theirs)):
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()
    zeros = (ours.state[model[0].weight]["square_avg"] == 0).float().mean()
    assert zeros > 0.2  # the case that matters was exercised
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ours.state_dict()["state"].values(), theirs.state_dict()["state"].values(),
                    strict=True):
        assert torch.equal(a["square_avg"], b["square_avg"]) and torch.equal(a["step"], b["step"])


def test_the_sqrt_floor_is_a_quarter_ulp_squared():
    assert exact_sqrt_floor(0.01) == 2.0 ** -64
    floor = exact_sqrt_floor(1e-6)
    eps = np.float32(1e-6)
    assert np.float32(np.sqrt(np.float32(floor))) + eps == eps


def test_epsilon_greedy_draws_uniform_then_action_from_the_exploration_stream():
    config = load_params(PARAMS, ["agent.network=nips"]).agent
    agent = DQNAgent(config, 4, 4, 84, torch.device("cpu"), torch.Generator().manual_seed(1),
                     learning_starts=100, reward_clip=1.0)
    state = np.zeros((4, 84, 84), np.uint8)
    rng, replay = np.random.default_rng(3), np.random.default_rng(3)
    halfway = 100 + config.epsilon_decay_steps * 5 // 9  # epsilon 1.0 -> 0.1: 0.5 here
    assert agent.epsilon(halfway) == pytest.approx(0.5)
    actions = [agent.act(state, halfway, rng) for _ in range(200)]
    greedy = agent.greedy_action(state)
    expected = []
    for _ in range(200):
        expected.append(int(replay.integers(4)) if replay.random() < agent.epsilon(halfway)
                        else greedy)
    assert actions == expected
    assert len(set(actions)) == 4
