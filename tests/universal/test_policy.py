"""The universal mode's policy-gradient arithmetic (universal/policy.py, rounding.py): exp
and log correctly rounded whatever the binary64 libm, and PPO's loss, draw and
normalisation against torch's float64 as a check of the maths (their bits are the spec's
own order, which nothing else computes)."""

from __future__ import annotations

import decimal

import numpy as np
import pytest
import torch

from reprodqn.universal import policy, rounding
from reprodqn.universal.errors import NumericsError

f32 = np.float32


def bits(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, f32)).view(np.uint32)


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(5)
    edges = [0.0, -0.0, 1.0, -1.0, 88.72283, 88.72284, -87.33654, -103.97, -104.0, 1e-30, -200]
    return np.concatenate([rng.uniform(-104, 89, 6000), rng.standard_normal(6000), edges]).astype(
        f32
    )


@pytest.mark.parametrize("function", ["exp32", "log32"])
def test_exp_and_log_round_exactly_from_any_libm_within_the_trusted_error(function, monkeypatch):
    """Ziv's test at work: with the binary64 result nudged by +-2^-30 (relative) and the
    trusted error widened to 2^-29 to match, every input still gets the bits of the exact
    decimal path; about 1 in 64 goes through it. (In use the trust is 2^-40, thousands of
    binary64 ulps.) Nudged without the test, the bits differ: the check bites."""
    x = _inputs() if function == "exp32" else np.abs(_inputs()[_inputs() != 0])
    name, real = ("exp", np.exp) if function == "exp32" else ("log", np.log)
    monkeypatch.setattr(rounding, "TRUST", 1.0)  # every value through the exact path
    exact = getattr(rounding, function)(x)
    for trust, agrees in ((2.0**-29, True), (0.0, False)):
        monkeypatch.setattr(rounding, "TRUST", trust)
        for nudge in (1 + 2.0**-30, 1 - 2.0**-30):
            monkeypatch.setattr(rounding.np, name, lambda v, n=nudge, **k: real(v, **k) * n)
            got = getattr(rounding, function)(x)
            monkeypatch.setattr(rounding.np, name, real)
            assert np.array_equal(bits(got), bits(exact)) == agrees


def test_the_exact_path_rounds_to_nearest_even():
    assert rounding._to_binary32(decimal.Decimal(1) + decimal.Decimal(2) ** -24) == f32(1.0)
    odd = f32(1.0 + 2.0**-23)
    halfway = decimal.Decimal(float(odd)) + decimal.Decimal(2) ** -24
    assert rounding._to_binary32(halfway) == np.nextafter(odd, f32(2))  # to the even one
    assert np.isinf(rounding._to_binary32(decimal.Decimal(2) ** 128))


def test_log_softmax_is_torchs_to_an_ulp():
    logits = np.random.default_rng(1).standard_normal((64, 6)).astype(f32) * f32(4)
    ours = policy.log_softmax(logits)
    theirs = torch.from_numpy(logits).double().log_softmax(-1).numpy()
    assert np.allclose(ours, theirs, rtol=0, atol=4e-7 * np.abs(theirs).max())


def test_the_draw_takes_the_first_action_whose_running_sum_exceeds_u():
    log_probs = np.log(np.array([[0.25, 0.25, 0.5]] * 4, np.float64)).astype(f32)
    quarter = 1 << 22  # u = 0.25 exactly: not below the first running sum, 0.25
    chosen = policy.sample(log_probs, np.array([0, quarter - 1, quarter, (1 << 24) - 1]))
    assert chosen.tolist() == [0, 0, 1, 2]


def test_draws_follow_the_probabilities():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    log_probs = np.repeat(np.log(probs).astype(f32)[None], 40_000, axis=0)
    draws = np.random.default_rng(2).integers(0, 1 << 24, 40_000)
    counts = np.bincount(policy.sample(log_probs, draws), minlength=4) / 40_000
    assert np.allclose(counts, probs, atol=0.01)


def _torch_ppo_loss(logits, values, actions, old, adv, returns, clip, vc, ec):
    lp = logits.log_softmax(-1)
    ratio = (lp.gather(1, actions[:, None]).squeeze(1) - old).exp()
    policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
    value_loss = 0.5 * ((values - returns) ** 2).mean()
    entropy = -(lp.exp() * lp).sum(-1).mean()
    return policy_loss + vc * value_loss - ec * entropy


def test_the_ppo_loss_and_its_gradient_are_torchs_in_float64_to_rounding():
    rng = np.random.default_rng(3)
    n, actions_count = 48, 4
    logits = rng.standard_normal((n, actions_count)).astype(f32)
    values = rng.standard_normal(n).astype(f32)
    actions = rng.integers(0, actions_count, n)
    old = policy.log_softmax(logits)[np.arange(n), actions] + rng.normal(0, 0.2, n).astype(f32)
    adv = policy.normalize(rng.standard_normal(n).astype(f32))
    returns = rng.standard_normal(n).astype(f32)
    coefs = (0.1, 0.5, 0.01)
    ours_logits = torch.from_numpy(logits).requires_grad_(True)
    ours_values = torch.from_numpy(values).requires_grad_(True)
    loss = policy.ppo_loss(ours_logits, ours_values, actions, old, adv, returns, *coefs)
    loss.backward()
    theirs_logits = torch.from_numpy(logits).double().requires_grad_(True)
    theirs_values = torch.from_numpy(values).double().requires_grad_(True)
    tensors = [torch.from_numpy(v) for v in (actions, old.astype(np.float64), adv, returns)]
    theirs = _torch_ppo_loss(theirs_logits, theirs_values, *tensors, *coefs)
    theirs.backward()
    clipped = np.abs(np.exp(policy.log_softmax(logits)[np.arange(n), actions] - old) - 1) > 0.1
    assert clipped.any() and not clipped.all()  # both branches of the clip are exercised
    assert abs(float(loss.detach()) - float(theirs.detach())) < 1e-5
    assert np.allclose(ours_logits.grad.numpy(), theirs_logits.grad.numpy(), atol=1e-6)
    assert np.allclose(ours_values.grad.numpy(), theirs_values.grad.numpy(), atol=1e-6)


def test_normalisation_is_torchs_unbiased_one():
    a = np.random.default_rng(4).standard_normal(300).astype(f32) * f32(3) + f32(1)
    expected = (a - a.mean(dtype=np.float64)) / (a.std(dtype=np.float64, ddof=1) + 1e-8)
    assert np.allclose(policy.normalize(a), expected, atol=1e-6)


def test_the_binary64_power_is_the_nearest_to_a_40_digit_one():
    """power64 (prioritized replay's p ** alpha and (N P) ** -beta in the universal mode):
    the binary64 nearest the decimal power, within an ulp of numpy's, 0 at a zero base."""
    rng = np.random.default_rng(6)
    bases = np.concatenate([rng.uniform(1e-6, 3.0, 500), [0.0, 1.0, 2.0]])
    ours = rounding.power64(bases, 0.6)
    context = decimal.Context(prec=60)
    for base, got in zip(bases[:50], ours[:50], strict=True):
        exact = context.power(decimal.Decimal(float(base)), decimal.Decimal(0.6)) if base else 0
        assert abs(decimal.Decimal(float(got)) - exact) <= decimal.Decimal(float(got)) * (
            decimal.Decimal(2) ** -53
        )
    assert ours[-3:].tolist() == [0.0, 1.0, float(decimal.Decimal(2) ** decimal.Decimal(0.6))]
    assert np.allclose(ours, bases**0.6, rtol=2**-51, atol=0)
    with pytest.raises(NumericsError, match="negative or non-finite base"):
        rounding.power64(np.array([-1.0]), 0.5)
