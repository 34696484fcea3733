"""The universal mode's Q-learning arithmetic: the greedy choice, the TD target, and the
loss of Q(s, a) with its gradient, each in the spec's order (docs/universal-numerics.md).
Small (a minibatch's 32 values), so written with numpy's elementwise operations on the host
(a GPU's values are copied over and back), each one correctly rounded IEEE-754 operation
per element on every machine, and explicit loops wherever a sum or a choice has an order.
"""

from __future__ import annotations

import numpy as np
import torch

from reprodqn.universal.backend import checked, host
from reprodqn.universal.errors import NumericsError
from reprodqn.universal.guard import unwatched
from reprodqn.universal.reference import add_sequence

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
    return first_max(host(q, "Q-values"))[1]


def max_q(q: torch.Tensor) -> np.ndarray:
    return first_max(host(q, "Q-values"))[0]


def _numpy(values) -> np.ndarray:
    return np.asarray(values.cpu().numpy() if isinstance(values, torch.Tensor) else values)


def td_target(
    rewards, next_q: np.ndarray, not_terminal, gamma: float, dtype: str, device="cpu"
) -> torch.Tensor:
    """float64 (the authors'): fl32(fl64(r) + fl64(fl64(gamma * q) * nt)); float32: the same
    operations in binary32. `gamma` is a number, or with n-step returns each sample's
    gamma^m (float64). On `device`, where the Q-values it is compared with are."""
    r, nt = _numpy(rewards), _numpy(not_terminal)
    kind: type[np.floating] = f64 if dtype == "float64" else f32
    scaled: np.ndarray = np.multiply(_numpy(gamma).astype(kind), next_q.astype(kind))
    target = r.astype(kind) + scaled * nt.astype(kind)
    return checked(torch.from_numpy(target.astype(f32)), "TD target").to(device)


class _LossFunction(torch.autograd.Function):
    """Huber (z < 1: 0.5 z * z, else z - 0.5, z = |y - t|) or squared error, summed in sample
    order from +0 (a sample's terms in row order), divided by the count for the mean. A
    term's gradient: Huber's clip(y - t, -1, 1), the squared error's 2 (y - t), divided by
    the count for the mean. With `actions`, y is the row's value at its action and the
    gradient is placed there, +0 elsewhere (Q(s, a)). With importance `weights`, each
    sample's term and its gradient are fl(w x) first (prioritized replay)."""

    @staticmethod
    @unwatched
    def forward(ctx, values, actions, targets, loss: str, reduction: str, weights=None):
        rows = host(values, "predictions")
        picked = None if actions is None else _numpy(actions)
        chosen = rows if picked is None else rows[np.arange(len(rows)), picked]
        delta = (chosen - host(targets, "targets")).reshape(-1)
        if loss == "huber":
            size = np.abs(delta)
            per_sample = np.where(size < 1, (f32(0.5) * size) * size, size - f32(0.5))
            slope = np.where(size < 1, delta, np.copysign(f32(1.0), delta)).astype(f32)
        elif loss in ("mse", "squared"):
            per_sample, slope = delta * delta, f32(2.0) * delta
        else:
            raise NumericsError(f"compute.numerics universal: no loss {loss!r} (huber or mse)")
        if weights is not None:
            w = host(weights, "importance weights").reshape(-1)
            per_sample, slope = w * per_sample.astype(f32), w * slope.astype(f32)
        total = f32(add_sequence(per_sample))
        count = f32(len(delta))
        if reduction == "mean":
            total, slope = f32(total / count), (slope / count).astype(f32)
        ctx.slope, ctx.shape, ctx.actions, ctx.device = slope, rows.shape, picked, values.device
        return checked(torch.tensor(total, dtype=torch.float32), f"{loss} loss").to(values.device)

    @staticmethod
    @unwatched
    def backward(ctx, grad_out):
        if float(grad_out) != 1.0:
            raise NumericsError("compute.numerics universal: the loss must be the last op")
        if ctx.actions is None:
            grad = ctx.slope.reshape(ctx.shape)
        else:
            grad = np.zeros(ctx.shape, f32)
            grad[np.arange(len(grad)), ctx.actions] = ctx.slope
        grad = torch.from_numpy(np.ascontiguousarray(grad)).to(ctx.device)
        return grad, None, None, None, None, None


def q_loss(
    q_all: torch.Tensor,
    actions: torch.Tensor,
    targets: torch.Tensor,
    loss: str,
    reduction: str,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of Q(s, a) against the targets (each sample's term weighted where `weights`
    is given), differentiable into the network."""
    return _LossFunction.apply(q_all, actions, targets, loss, reduction, weights)


def regression_loss(
    predictions: torch.Tensor, targets: torch.Tensor, loss: str = "mse", reduction: str = "mean"
) -> torch.Tensor:
    """Huber or squared error of predictions against targets of the same shape."""
    return _LossFunction.apply(predictions, None, targets, loss, reduction)
