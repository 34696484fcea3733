"""The universal optimizers: the authors' RMSprop, DeepMind's centred RMSprop and Adam, each
step one pass per parameter in the spec's order (docs/universal-numerics.md), compiled by
numba like the layers' kernels. Hyperparameters enter as the binary32 nearest them; Adam's
bias corrections are kept in binary64 as running products (beta ** t through libm's pow is
not correctly rounded everywhere) and their root is the correctly rounded math.sqrt.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np
import torch

from reprodqn.universal import cpu
from reprodqn.universal.layers import _checked

f32 = np.float32


@functools.cache
def _loops() -> SimpleNamespace:
    from numba import njit

    fma32 = cpu.fma32()
    jit = functools.partial(njit, fastmath=False, error_model="numpy", nogil=True, cache=True)

    @jit
    def rmsprop(param, grad, square_avg, alpha, one_minus_alpha, eps, neg_lr):
        for i in range(param.size):
            g = grad[i]
            s = fma32(one_minus_alpha * g, g, square_avg[i] * alpha)
            square_avg[i] = s
            param[i] = param[i] + (neg_lr * g) / (np.sqrt(s) + eps)

    @jit
    def rmsprop_centered(param, grad, grad_avg, square_avg, alpha, one_minus_alpha, eps, neg_lr):
        for i in range(param.size):
            g = grad[i]
            mean = fma32(one_minus_alpha, g, grad_avg[i] * alpha)
            s = fma32(one_minus_alpha * g, g, square_avg[i] * alpha)
            grad_avg[i], square_avg[i] = mean, s
            param[i] = param[i] + (neg_lr * g) / np.sqrt(fma32(-mean, mean, s) + eps)

    @jit
    def adam(
        param, grad, exp_avg, exp_avg_sq, one_minus_b1, beta2, one_minus_b2, root_c2, eps, neg_step
    ):
        for i in range(param.size):
            g = grad[i]
            m = fma32(one_minus_b1, g - exp_avg[i], exp_avg[i])
            v = fma32(one_minus_b2 * g, g, exp_avg_sq[i] * beta2)
            exp_avg[i], exp_avg_sq[i] = m, v
            param[i] = param[i] + (neg_step * m) / (np.sqrt(v) / root_c2 + eps)

    return SimpleNamespace(rmsprop=rmsprop, rmsprop_centered=rmsprop_centered, adam=adam)


def _flat(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().view(-1).numpy()


class _Universal(torch.optim.Optimizer):
    """Per parameter: a float32 step count and zeroed float32 buffers, then `_update`."""

    buffers: tuple[str, ...] = ()

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    for name in self.buffers:
                        state[name] = torch.zeros_like(param)
                state["step"].fill_(float(state["step"]) + 1)  # a count: exact to 2^24
                self._update(group, param, state)
                torch.autograd.graph.increment_version(param)  # written through numpy
                _checked(_flat(param), f"{type(self).__name__} step")

    def _update(self, group, param, state) -> None:
        raise NotImplementedError


class RMSprop(_Universal):
    """s = fma(fl((1-a) g), g, fl(s a)); p = fl(p + fl(fl(-lr g) / fl(sqrt(s) + eps)))."""

    buffers = ("square_avg",)

    def __init__(self, params, lr: float, alpha: float, eps: float):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    def _update(self, group, param, state):
        alpha = group["alpha"]
        _loops().rmsprop(
            _flat(param),
            _flat(param.grad),
            _flat(state["square_avg"]),
            f32(alpha),
            f32(1 - alpha),
            f32(group["eps"]),
            f32(-group["lr"]),
        )


class CenteredRMSprop(_Universal):
    """g_ = fma(1-a, g, fl(g_ a)); s = fma(fl((1-a) g), g, fl(s a));
    p = fl(p + fl(fl(-lr g) / sqrt(fl(fma(-g_, g_, s) + eps))))."""

    buffers = ("square_avg", "grad_avg")

    def __init__(self, params, lr: float, alpha: float, eps: float):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    def _update(self, group, param, state):
        alpha = group["alpha"]
        _loops().rmsprop_centered(
            _flat(param),
            _flat(param.grad),
            _flat(state["grad_avg"]),
            _flat(state["square_avg"]),
            f32(alpha),
            f32(1 - alpha),
            f32(group["eps"]),
            f32(-group["lr"]),
        )


class Adam(_Universal):
    """m = fma(1-b1, fl(g - m), m); v = fma(fl((1-b2) g), g, fl(v b2));
    p = fl(p + fl(fl(-lr_t m) / fl(fl(sqrt(v) / c2) + eps))), with lr_t = lr / (1 - b1^t) and
    c2 = sqrt(1 - b2^t) in binary64, b^t a running product kept in the state."""

    buffers = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    def _update(self, group, param, state):
        beta1, beta2 = group["betas"]
        for name, beta in (("beta1_power", beta1), ("beta2_power", beta2)):
            previous = state.get(name, torch.ones((), dtype=torch.float64))
            state[name] = torch.tensor(float(previous) * beta, dtype=torch.float64)
        step_size = group["lr"] / (1 - float(state["beta1_power"]))
        root_c2 = math.sqrt(1 - float(state["beta2_power"]))
        _loops().adam(
            _flat(param),
            _flat(param.grad),
            _flat(state["exp_avg"]),
            _flat(state["exp_avg_sq"]),
            f32(1 - beta1),
            f32(beta2),
            f32(1 - beta2),
            f32(root_c2),
            f32(group["eps"]),
            f32(-step_size),
        )
