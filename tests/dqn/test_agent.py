"""The agent's optimizer is torch's RMSprop bit for bit, and acting draws as the authors did."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from reprodqn.config.params import load_params
from reprodqn.determinism.rng import AuthorsStream
from reprodqn.dqn.agent import DQNAgent
from reprodqn.dqn.optimizers import RMSprop, exact_sqrt_floor, ieee_sqrt_
from tests.helpers import PARAMS


@pytest.mark.parametrize("eps", [0.01, 1e-6])  # the paper's value and the 2018 code's
def test_rmsprop_matches_torch_bit_for_bit_with_zero_square_averages(eps, monkeypatch):
    # torch's arithmetic with its root correctly rounded, as ours (ieee_sqrt_) and CUDA's
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda self: ieee_sqrt_(self.clone()))
    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    reference = copy.deepcopy(model)
    ours = RMSprop(model.parameters(), lr=2.5e-4, alpha=0.95, eps=eps)
    theirs = torch.optim.RMSprop(
        reference.parameters(), lr=2.5e-4, alpha=0.95, eps=eps, foreach=False
    )
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
    for a, b in zip(
        ours.state_dict()["state"].values(), theirs.state_dict()["state"].values(), strict=True
    ):
        assert torch.equal(a["square_avg"], b["square_avg"]) and torch.equal(a["step"], b["step"])


def test_the_sqrt_floor_is_a_quarter_ulp_squared():
    assert exact_sqrt_floor(0.01) == 2.0**-64
    floor = exact_sqrt_floor(1e-6)
    eps = np.float32(1e-6)
    assert np.float32(np.sqrt(np.float32(floor))) + eps == eps


def paper_agent(**overrides):
    config = load_params(PARAMS, ["agent.network=nips"]).agent.model_copy(update=overrides)
    return DQNAgent(
        config,
        n_actions=4,
        history_length=4,
        screen_size=84,
        device=torch.device("cpu"),
        init_generator=torch.Generator().manual_seed(1),
        learning_starts=50_000,
        reward_clip=1.0,
    )


def test_epsilon_greedy_draws_uniform_then_action_from_the_exploration_stream():
    agent = paper_agent()
    agent.epsilon.value = 0.5
    state = np.zeros((4, 84, 84), np.uint8)
    ours, theirs = AuthorsStream(3), np.random.RandomState(3)
    actions = [agent.act(state, ours) for _ in range(200)]
    greedy = agent.greedy_action(state)
    expected = [
        theirs.randint(4) if theirs.uniform(0, 1) < 0.5 else greedy for _ in range(200)
    ]  # dqn/dqn.py eGreedy_action
    assert actions == expected
    assert len(set(actions)) == 4


class CountingReplay:
    def sample(self, batch_size, rng):
        return None


def test_paper_cadence_first_update_after_50005_transitions_and_49999_by_250k(monkeypatch):
    """The authors' loop (dqn/train.py): after acting at step t (from 0), if t > 50,000:
    anneal epsilon, and update if t % 4 == 0; then copy the target if (t + 1) % 10,000 == 1.
    The checkpoint at 250K is written before step 250,000 acts."""
    agent = paper_agent()
    updates, copies, epsilons = [], [], {}
    monkeypatch.setattr(agent, "update", lambda batch: updates.append(t) or torch.zeros(()))
    monkeypatch.setattr(agent, "sync_target", lambda: copies.append(t))
    for t in range(250_000):
        epsilons[t] = agent.epsilon.value  # the epsilon step t acts with
        agent.learn(t, CountingReplay(), None)
    assert updates[0] == 50_004  # 50,005 transitions stored by then
    assert len(updates) == 49_999
    assert copies[:3] == [0, 10_000, 20_000] and len(copies) == 25
    # epsilon: 1.0 through step 50,001, then minus 0.9e-6 per step, as a running value
    assert epsilons[50_001] == 1.0 and epsilons[50_002] == 1.0 - 0.9 / 1_000_000
    running = 1.0
    for _ in range(50_001, 249_999):
        running = max(running - 0.9 / 1_000_000, 0.1)
    assert epsilons[249_999] == running  # bit for bit, not approximately


def test_target_dtype_float64_rounds_once_from_float64_as_the_authors():
    rewards = torch.tensor([1.0, 0.0, -1.0, 1.0])
    next_q = torch.tensor(
        [0.27084043622016907, 0.054972484707832336, 0.18988995254039764, 2.7182817]
    )
    not_terminal = torch.tensor([True, True, True, False])
    agent = paper_agent(target_dtype="float64")
    agent.target = lambda states: torch.stack([next_q, next_q - 1]).T
    ours = agent.td_target(rewards, None, not_terminal)
    theirs = [
        float(r) if not nt else float(r) + 0.99 * float(q)  # dqn/dqn.py compute_labels
        for r, q, nt in zip(rewards, next_q, not_terminal, strict=True)
    ]
    assert ours.dtype == torch.float32
    assert ours.tolist() == np.array(theirs, dtype=np.float32).tolist()
    agent.config = agent.config.model_copy(update={"target_dtype": "float32"})
    single = agent.td_target(rewards, None, not_terminal)
    assert not torch.equal(single, ours)  # the two precisions are distinguishable here


def random_batch(size: int = 32, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    states = rng.integers(0, 256, (size + 1, 4, 84, 84), dtype=np.uint8)
    return {
        "states": states[:size],
        "next_states": states[1:],
        "actions": rng.integers(0, 4, size),
        "rewards": rng.choice([0.0, 1.0], size),
        "terminals": rng.random(size) < 0.1,
    }


def one_update(order=None, monkeypatch=None):
    """An agent after one update, its rows summed in the given order (None: fixed)."""
    from reprodqn.dqn import agent as agent_module

    config = load_params(PARAMS, ["agent.network=nips"]).agent
    agent = DQNAgent(
        config,
        n_actions=4,
        history_length=4,
        screen_size=84,
        device=torch.device("cpu"),
        init_generator=torch.Generator().manual_seed(1),
        learning_starts=0,
        reward_clip=1.0,
        reduction_order="fixed" if order is None else "random",
    )
    if order is not None:
        monkeypatch.setattr(agent_module, "os_entropy_order", lambda n: order)
    batch = random_batch()
    batch["rewards"] = batch["rewards"].astype(np.float32)
    loss, td_errors = agent.update_with_td_errors(batch)
    return agent, loss, td_errors


def test_a_random_reduction_order_changes_the_bits_not_the_mathematics(monkeypatch):
    """compute.cpu_reduction_order=random: the same rows, summed in another order by the loss
    and every weight gradient, give the fixed-order update to within float32 rounding, and
    other bits; TD errors come back in the minibatch's order."""
    fixed, fixed_loss, fixed_td = one_update()
    reversed_order = np.arange(32)[::-1].copy()
    shuffled, loss, td = one_update(reversed_order, monkeypatch)
    assert torch.equal(td, fixed_td)  # per-row values: only the sums' order changed
    assert abs(float(loss) - float(fixed_loss)) <= 1e-6 * abs(float(fixed_loss))
    differing = 0
    for (name, a), b in zip(
        fixed.online.named_parameters(), shuffled.online.parameters(), strict=True
    ):
        differing += int(not torch.equal(a, b))
        scale = float(a.detach().abs().max())
        assert float((a - b).detach().abs().max()) <= 1e-6 * scale, name
    assert differing > 0


def test_the_reduction_order_is_drawn_from_os_entropy_not_a_seeded_stream():
    from reprodqn.dqn.agent import os_entropy_order

    draws = {tuple(os_entropy_order(32)) for _ in range(3)}
    assert all(sorted(d) == list(range(32)) for d in draws)
    assert len(draws) == 3  # 32! orders: three equal draws would mean a fixed seed
