"""The optimizers DQN was trained with: DeepMind's centred RMSProp and Adam checked against
values worked out by hand (not the formula restated), Adam bit-identical to torch's, the
loss reductions, and both optimizers deterministic and exactly resumable in training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn.config.params import load_params, resolve_run
from reprodqn.core import workspace
from reprodqn.dqn.optimizers import Adam, CenteredRMSprop, exact_sqrt_floor, ieee_sqrt_
from reprodqn.training.loop import train
from tests.helpers import ADAM, CENTERED, PARAMS


def two_steps(optimizer_class, grads, **kwargs) -> list[list[float]]:
    weight = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    optimizer = optimizer_class([weight], **kwargs)
    seen = []
    for grad in grads:
        weight.grad = torch.tensor(grad)
        optimizer.step()
        seen.append(weight.detach().tolist())
    return seen


def test_centered_rmsprop_matches_deepminds_update_worked_by_hand():
    # dw = 2, a = 0.95, eps = 0.06, lr = 0.01. Step 1: g = 0.1, g2 = 0.2,
    # g2 - g^2 + eps = 0.2 - 0.01 + 0.06 = 0.25, root 0.5, w = 1 - 0.01 * 2 / 0.5 = 0.96.
    # Step 2: g = 0.195, g2 = 0.39, 0.39 - 0.038025 + 0.06 = 0.411975,
    # root 0.6418528... , w = 0.96 - 0.02 / 0.6418528 = 0.92884... (dw = -2 mirrors it).
    steps = two_steps(CenteredRMSprop, [[2.0, -2.0], [2.0, -2.0]], lr=0.01, alpha=0.95, eps=0.06)
    assert steps[0] == pytest.approx([0.96, 1.04], abs=1e-7)
    assert steps[1] == pytest.approx([0.9288403, 1.0711597], abs=1e-6)


def test_centered_rmsprop_puts_eps_inside_the_root_unlike_torchs():
    # a constant gradient has zero variance: DeepMind's step is lr dw / sqrt(eps) at most;
    # torch's centred RMSprop adds eps after the root: lr dw / (0 + eps) here.
    steps = two_steps(CenteredRMSprop, [[1e-3, 1e-3]], lr=0.01, alpha=0.95, eps=0.01)
    # g = 5e-5, g2 = 5e-8, g2 - g^2 = 4.75e-8, + 0.01 -> root 0.10000024, step 1e-5 / 0.1;
    # torch's: root 2.18e-4, + 0.01 = 0.010218, step 1e-5 / 0.010218 = 9.79e-4
    assert steps[0] == pytest.approx([1 - 1e-4, 1 - 1e-4], abs=1e-7)


def test_adam_first_steps_worked_by_hand():
    # lr 0.01, betas 0.9/0.999, eps 1.5e-4, dw = 2. Step 1: m = 0.2, v = 0.004; corrected
    # 2 and 4, root 2: w = 1 - 0.01 * 2 / 2.00015 = 0.99000075. Step 2 with dw = 0:
    # m = 0.18, v = 0.003996; corrected 0.18/0.19 = 0.947368, 0.003996/0.001999 = 1.998999,
    # root 1.413860: w -= 0.01 * 0.947368 / 1.414010 = 0.006699859 -> 0.98330089.
    steps = two_steps(Adam, [[2.0, 2.0], [0.0, 0.0]], lr=0.01, betas=(0.9, 0.999), eps=1.5e-4)
    assert steps[0] == pytest.approx([0.99000075, 0.99000075], abs=1e-7)
    assert steps[1] == pytest.approx([0.98330089, 0.98330089], abs=1e-6)


@pytest.mark.parametrize("eps", [1.5e-4, 1e-8])
def test_adam_matches_torch_bit_for_bit_with_dead_units(eps, monkeypatch):
    # torch's arithmetic with its root correctly rounded, as ours (ieee_sqrt_) and CUDA's
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda self: ieee_sqrt_(self.clone()))
    torch.manual_seed(0)  # test data only; nothing here is part of a run
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    reference = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4)
    )
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():  # half the hidden units dead: zero gradients, zero second moments
        for net in (model, reference):
            net[0].bias[:64] = -100.0
    ours = Adam(model.parameters(), lr=6.25e-5, betas=(0.9, 0.999), eps=eps)
    theirs = torch.optim.Adam(
        reference.parameters(), lr=6.25e-5, betas=(0.9, 0.999), eps=eps, foreach=False, fused=False
    )
    for _ in range(30):
        x = torch.randn(32, 64) * 1e-3
        for net, optimizer in ((model, ours), (reference, theirs)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    assert (ours.state[model[0].weight]["exp_avg_sq"] == 0).any()  # the clamp was exercised


def test_adam_floor_scales_with_the_bias_correction():
    assert exact_sqrt_floor(1.5e-4, 0.5) == exact_sqrt_floor(1.5e-4) / 4


def test_sum_reduction_is_the_mean_times_the_batch():
    from reprodqn.dqn.agent import DQNAgent

    agents = {}
    for reduction in ("mean", "sum"):
        params = load_params(PARAMS, ["agent.network=nips", f"agent.loss_reduction={reduction}"])
        agents[reduction] = DQNAgent.__new__(DQNAgent)
        agents[reduction].config = resolve_run(params, "deterministic", 0).agent
    q, targets = torch.tensor([0.0, 1.0, 5.0]), torch.tensor([0.5, 3.0, 5.25])
    # Huber: 0.5 * 0.5^2 = 0.125, |2| - 0.5 = 1.5, 0.5 * 0.25^2 = 0.03125
    assert agents["sum"].loss(q, targets).item() == pytest.approx(1.65625)
    assert agents["mean"].loss(q, targets).item() == pytest.approx(1.65625 / 3)
    weights = torch.tensor([1.0, 0.0, 2.0])
    assert agents["sum"].loss(q, targets, weights).item() == pytest.approx(0.1875)


TINY_NIPS = [
    "agent.network=nips",
    "agent.batch_size=8",
    "agent.target_sync_every=100",
    "agent.epsilon_decay_steps=300",
    "replay.capacity=1000",
    "replay.learning_starts=200",
    "train.steps=1200",
    "train.checkpoint_every=400",
    "train.log_every=100",
]


def tiny_run(tmp_path, optimizer_overrides, name):
    params = load_params(PARAMS, [*TINY_NIPS, *optimizer_overrides])
    config = resolve_run(params, "deterministic", 0)
    run_dir = tmp_path / name
    for _ in train(config, run_dir):
        pass
    return config, run_dir


# DeepMind 2015's and Dopamine's optimizer settings (the presets' agent sections)


@pytest.mark.parametrize("optimizer", [CENTERED, ADAM], ids=["rmsprop_centered", "adam"])
def test_new_optimizers_train_twice_to_one_chain(tmp_path, optimizer):
    """Kill -9 and resume: tests/training/test_train.py runs its SIGKILL test with each of them."""
    config, first = tiny_run(tmp_path, optimizer, "first")
    _, second = tiny_run(tmp_path, optimizer, "second")
    assert (first / "hashes.jsonl").read_text() == (second / "hashes.jsonl").read_text()
    assert len(workspace.read_hashes(first)) == 4
    default = resolve_run(load_params(PARAMS, TINY_NIPS), "deterministic", 0)
    assert config.digest() != default.digest()


def test_the_optimizers_root_is_the_correctly_rounded_one():
    """ieee_sqrt_ gives the IEEE root (numpy's, the sqrt instruction) on values across the
    float32 range, zeros and subnormals included; torch's own CPU root need not (MKL's
    vector math: 17% of such values missed on an Intel Xeon at the portable floor)."""
    values = np.concatenate(
        [
            np.float32(10.0) ** np.linspace(-44, 38, 100_001, dtype=np.float32),
            np.array([0.0, np.finfo(np.float32).tiny, 1e-45], np.float32),
        ]
    )
    values = values.astype(np.float32)
    ours = ieee_sqrt_(torch.from_numpy(values.copy())).numpy()
    expected = np.array([np.sqrt(np.float64(v)) for v in values]).astype(np.float32)
    assert np.array_equal(ours, expected)  # sqrt in float64, rounded once: exact (Figueroa)
