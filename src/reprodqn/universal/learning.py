"""The universal mode's Q-learning arithmetic: the greedy choice, the TD target, and the
loss of Q(s, a) with its gradient, each in the spec's order (docs/universal-numerics.md).
Small (a minibatch's 32 values), so written with numpy's elementwise operations, each one
correctly rounded IEEE-754 operation per element on every machine, and explicit loops
wherever a sum or a choice has an order.
"""

from __future__ import annotations

import numpy as np
import torch

from reprodqn.universal.layers import NumericsError, _checked, _host

f32, f64 = np.float32, np.float64


def first_max(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's maximum and the first index holding it: a later value wins only if it is
    greater (so -0 after +0 loses)."""
    best, index = values[:, 0].copy(), np.zeros(len(values), np.int64)
    for column in range(1, values.shape[1]):
        greater = values[:, column] > best
        best = np.where(greater, values[:, column], best)
        index = np.where(greater, column, index)
    return best, index


def greedy_actions(q: torch.Tensor) -> np.ndarray:
    return first_max(_host(q, "Q-values"))[1]


def max_q(q: torch.Tensor) -> np.ndarray:
    return first_max(_host(q, "Q-values"))[0]


def td_target(rewards, next_q: np.ndarray, not_terminal, gamma: float, dtype: str) -> torch.Tensor:
    """float64 (the authors'): fl32(fl64(r) + fl64(fl64(gamma * q) * nt)); float32: the same
    operations in binary32."""
    r = np.asarray(rewards.numpy() if isinstance(rewards, torch.Tensor) else rewards)
    nt = np.asarray(
        not_terminal.numpy() if isinstance(not_terminal, torch.Tensor) else not_terminal
    )
    kind: type[np.floating] = f64 if dtype == "float64" else f32
    scaled: np.ndarray = np.multiply(kind(gamma), next_q.astype(kind))
    target = r.astype(kind) + scaled * nt.astype(kind)
    return _checked(target.astype(f32), "TD target")


def _sum_ascending(terms: np.ndarray) -> np.float32:
    total = f32(0.0)
    for term in terms:
        total = f32(total + term)
    return total


class _QLossFunction(torch.autograd.Function):
    """Huber (z < 1: 0.5 z * z, else z - 0.5, z = |q - t|) or squared error of Q(s, a), summed
    in sample order from +0, divided by the batch for the mean. The gradient of a sample:
    Huber's clip(q - t, -1, 1), the squared error's 2 (q - t); divided by the batch for the
    mean; placed at its action, +0 elsewhere."""

    @staticmethod
    def forward(ctx, q_all, actions, targets, loss: str, reduction: str):
        q_rows = _host(q_all, "Q-values")
        taken = q_rows[np.arange(len(q_rows)), actions.numpy()]
        delta = taken - _host(targets, "TD targets")
        if loss == "huber":
            size = np.abs(delta)
            per_sample = np.where(size < 1, (f32(0.5) * size) * size, size - f32(0.5))
            slope = np.where(size < 1, delta, np.copysign(f32(1.0), delta)).astype(f32)
        else:
            per_sample, slope = delta * delta, f32(2.0) * delta
        total = _sum_ascending(per_sample.astype(f32))
        batch = f32(len(delta))
        if reduction == "mean":
            total, slope = f32(total / batch), (slope / batch).astype(f32)
        ctx.slope, ctx.actions, ctx.shape = slope, actions.numpy(), q_rows.shape
        return _checked(np.asarray(total, f32), f"{loss} loss")

    @staticmethod
    def backward(ctx, grad_out):
        if float(grad_out) != 1.0:
            raise NumericsError("compute.numerics universal: the loss must be the last op")
        grad = np.zeros(ctx.shape, f32)
        grad[np.arange(len(grad)), ctx.actions] = ctx.slope
        return torch.from_numpy(grad), None, None, None, None


def q_loss(
    q_all: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor, loss: str, reduction: str
) -> torch.Tensor:
    """The loss of Q(s, a) against the targets, differentiable into the network."""
    return _QLossFunction.apply(q_all, actions, targets, loss, reduction)
