"""The universal mode's policy-gradient arithmetic (PPO's): the log-softmax, a categorical
draw, advantage normalisation, and PPO's clipped loss with its gradient, each in the spec's
order (docs/universal-numerics.md, "policy gradients"). Like learning.py, small (a
minibatch's logits), so computed on the host in numpy: each elementwise operation one
correctly rounded binary32 operation on every machine, exp and log correctly rounded
(rounding.py), every sum an explicit loop from +0.

The gradient is written out by hand, not left to autograd: torch's engine would add the
policy's and the entropy's gradients of the log-probabilities with its own kernels.
"""

from __future__ import annotations

import numpy as np
import torch

from reprodqn.universal.backend import checked, host
from reprodqn.universal.errors import NumericsError
from reprodqn.universal.guard import unwatched
from reprodqn.universal.reference import add_sequence, fma32
from reprodqn.universal.rounding import exp32, log32

f32 = np.float32


def _sum_columns(terms: np.ndarray) -> np.ndarray:
    """Each row's sum over its columns in order, from +0."""
    return add_sequence(terms, axis=1)


def _mean(terms: np.ndarray) -> np.float32:
    """fl(sum in order from +0 / n)."""
    return f32(add_sequence(terms) / f32(terms.size))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Each row: m its maximum, z = fl(l - m), s = sum of exp32(z) in column order from +0,
    then fl(z - log32(s))."""
    logits = np.asarray(logits, f32)
    shifted = logits - logits.max(axis=1, keepdims=True)  # max: a selection, exact
    return shifted - log32(_sum_columns(exp32(shifted)))[:, None]


def sample(log_probs: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """One draw per row: u = bits * 2^-24 (24 random bits, an integer draw: the same
    everywhere), then the first action whose running sum of exp32(log p), from +0 in column
    order, exceeds u; the last action if rounding leaves the sum at or below u."""
    probs = exp32(log_probs)
    unit = (np.asarray(bits, np.int64) * 2.0**-24).astype(f32)  # exact
    chosen = np.full(len(probs), probs.shape[1] - 1, np.int64)
    running = np.zeros(len(probs), f32)
    undecided = np.ones(len(probs), bool)
    for column in range(probs.shape[1]):
        running = running + probs[:, column]
        hit = undecided & (unit < running)
        chosen[hit], undecided = column, undecided & ~hit
    return chosen


def normalize(advantages: np.ndarray) -> np.ndarray:
    """fl(fl(a - mu) / fl(sd + 1e-8)): mu the mean, sd = sqrt of the unbiased variance, each
    sum in order from +0."""
    a = np.asarray(advantages, f32).reshape(-1)
    mu = _mean(a)
    centred = a - mu
    sd = np.sqrt(f32(add_sequence(centred * centred) / f32(a.size - 1)))
    return centred / f32(sd + f32(1e-8))


class _PPOLoss(torch.autograd.Function):
    """loss = fl(fl(PL + fl(c_v VL)) - fl(c_e H)), with lp = log_softmax(logits), r =
    exp32(fl(lp[a] - old)); PL = -mean(min(fl(r A), fl(clip(r) A))) (the first when equal);
    VL = fl(0.5 mean(fl(e e))), e = fl(v - R); H = mean(-(sum_j fl(p lp))), p = exp32(lp).
    Gradients: d_v = fl(c_v fl(e / n)); on the chosen log-probability
    fl(fl(fl(-1 / n) A) r) where r's branch is live (the clipped one only inside the clip),
    plus on every log-probability the entropy's fl(fl(fl(c_e / n) p) fl(lp + 1)); into the
    logits by the log-softmax's g - p sum(g): fma(-p, G, g), G summed in column order."""

    @staticmethod
    @unwatched
    def forward(ctx, logits, values, actions, old_log_probs, advantages, returns, coefs):
        clip, value_coef, entropy_coef = (f32(c) for c in coefs)
        lp = log_softmax(host(logits, "policy logits"))
        n, rows = f32(len(lp)), np.arange(len(lp))
        picked = np.asarray(actions, np.int64)
        ratio = exp32(lp[rows, picked] - np.asarray(old_log_probs, f32))
        adv = np.asarray(advantages, f32)
        low, high = f32(f32(1.0) - clip), f32(f32(1.0) + clip)
        clipped = np.minimum(np.maximum(ratio, low), high)
        plain_term, clipped_term = ratio * adv, clipped * adv
        use_plain = plain_term <= clipped_term
        policy_loss = -_mean(np.where(use_plain, plain_term, clipped_term))
        error = host(values, "values") - np.asarray(returns, f32)
        value_loss = f32(f32(0.5) * _mean(error * error))
        probs = exp32(lp)
        entropy = _mean(-_sum_columns(probs * lp))
        loss = f32(f32(policy_loss + f32(value_coef * value_loss)) - f32(entropy_coef * entropy))
        live = use_plain | ((ratio >= low) & (ratio <= high))
        ctx.save = (lp, probs, picked, ratio, adv, live, error, n, value_coef, entropy_coef)
        ctx.devices = (logits.device, values.device)
        return checked(torch.tensor(loss, dtype=torch.float32), "PPO loss").to(logits.device)

    @staticmethod
    @unwatched
    def backward(ctx, grad_out):
        if float(grad_out) != 1.0:
            raise NumericsError("compute.numerics universal: the PPO loss must be the last op")
        lp, probs, picked, ratio, adv, live, error, n, value_coef, entropy_coef = ctx.save
        rows = np.arange(len(lp))
        grad_values = value_coef * (error / n)
        grad_lp = (f32(entropy_coef / n) * probs) * (lp + f32(1.0))
        grad_chosen = np.where(live, (f32(f32(-1.0) / n) * adv) * ratio, f32(0.0))
        grad_lp[rows, picked] = grad_lp[rows, picked] + grad_chosen
        total = _sum_columns(grad_lp)
        grad_logits = fma32(-probs, total[:, None], grad_lp)
        logits_device, values_device = ctx.devices
        return (
            torch.from_numpy(np.ascontiguousarray(grad_logits, f32)).to(logits_device),
            torch.from_numpy(np.ascontiguousarray(grad_values, f32)).to(values_device),
            None,
            None,
            None,
            None,
            None,
        )


def ppo_loss(
    logits: torch.Tensor,
    values: torch.Tensor,
    actions,
    old_log_probs,
    advantages,
    returns,
    clip: float,
    value_coef: float,
    entropy_coef: float,
) -> torch.Tensor:
    """PPO's clipped loss (policy, value and entropy terms) of a minibatch, differentiable
    into the logits and the values; the rest are numpy arrays (or tensors) of its rows."""
    arrays = [
        np.asarray(x.cpu().numpy() if isinstance(x, torch.Tensor) else x)
        for x in (actions, old_log_probs, advantages, returns)
    ]
    coefs = (clip, value_coef, entropy_coef)
    return _PPOLoss.apply(logits, values, *arrays, coefs)
