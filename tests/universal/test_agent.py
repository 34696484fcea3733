"""The universal agents' learning rule on hand-built Q tables: Double DQN's target takes the
online network's first greedy action valued by the target network, DQN's the target's own
maximum, ties going to the first action; and a universal Double DQN trains to one chain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn.config.params import load_params
from reprodqn.dqn.agent import UniversalDoubleDQN, UniversalDQN, make_agent
from tests.config.test_variants import Table
from tests.helpers import PARAMS, TINY, train_tiny

UNIVERSAL = ["compute.numerics=universal", "env.resize=linear_exact"]


def universal_agent(double: bool):
    config = load_params(PARAMS, ["agent.network=nips", f"agent.double={double}"]).agent
    agent = make_agent(
        config,
        n_actions=2,
        history_length=4,
        screen_size=84,
        device=torch.device("cpu"),
        init_generator=torch.Generator().manual_seed(1),
        learning_starts=50_000,
        reward_clip=1.0,
        numerics="universal",
    )
    agent.online = Table([[1.0, 3.0], [4.0, 0.0], [2.0, 2.0]])
    agent.target = Table([[5.0, 2.0], [1.0, 7.0], [-0.0, 0.0]])
    return agent


def test_the_universal_targets_are_the_rules():
    next_states = torch.zeros(3, 4, 84, 84, dtype=torch.uint8)
    next_states[1], next_states[2] = 1, 2
    double, dqn = universal_agent(True), universal_agent(False)
    assert isinstance(double, UniversalDoubleDQN) and type(dqn) is UniversalDQN
    # state 2: online ties at 2 -> its first action, whose target value is -0
    assert double.next_values(next_states).tolist() == [2.0, 1.0, -0.0]
    assert np.signbit(double.next_values(next_states)[2])
    # the target's own maximum; its tie of -0 and +0 keeps the first (-0)
    values = dqn.next_values(next_states)
    assert values.tolist() == [5.0, 7.0, 0.0] and np.signbit(values[2])


def test_a_universal_double_dqn_with_adam_trains_twice_to_one_chain(tmp_path):
    variant = ["agent.double=true", "agent.optimizer=adam", "train.steps=400"]
    params = load_params(PARAMS, [*TINY, *UNIVERSAL, *variant])
    first = train_tiny(params, tmp_path / "a")
    assert first == train_tiny(params, tmp_path / "b")
    assert all(line["numerics"] == "universal" for line in first)
    assert first[-1]["updates"] > 0


@pytest.mark.parametrize("dueling", [False, True])
def test_a_forward_without_gradient_is_the_layers_forward_at_every_batch_size(dueling):
    """Acting, evaluation and the TD target run straight on the kernels (universal.host):
    the same bits as the layers' autograd path, and a state's Q-values the same whatever
    else shares its batch (every output its own chain)."""
    from reprodqn.dqn.network import build_q_network, q_values
    from reprodqn.universal import host

    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(3), dueling,
                          numerics="universal")  # fmt: skip
    frames = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (5, 4, 84, 84), np.uint8))
    with_grad = net(frames).detach().numpy()
    with torch.inference_mode():
        assert host.applies(frames)
        together = net(frames).numpy()
        alone = np.concatenate([net(frames[i : i + 1]).numpy() for i in range(5)])
    assert np.array_equal(together.view(np.uint32), with_grad.view(np.uint32))
    assert np.array_equal(alone.view(np.uint32), together.view(np.uint32))
    in_chunks = q_values(net, frames.numpy(), chunk=2)  # evaluation: all in one batch
    assert np.array_equal(in_chunks.view(np.uint32), together.view(np.uint32))
