"""The optimizers DQN has been trained with, each deterministic, its state tensors saved in
resume points (`agent.optimizer` picks one):

- rmsprop: torch.optim.RMSprop as the authors call it (uncentred, eps added after the
  square root), its arithmetic in its order, with a speed fix for zero square averages;
- rmsprop_centered: DeepMind's 2015 RMSProp (deepmind/dqn, NeuralQLearner.lua): centred,
  eps inside the square root, no momentum; torch has no such option, so it is written here;
- adam: torch.optim.Adam (Dopamine's JAX DQN, CleanRL), the same, with the same speed fix.

Every root is the correctly rounded one (ieee_sqrt_): torch's CPU root is not, and differs
between Intel and AMD CPUs even at the portable floor; CUDA's, which the authors ran, is.

Why the speed fix: torch 2.13's CPU sqrt is ~10x slower on zeros and ~28x on 1e-30 than on
1e-26 or more (measured on the AVX2 path), and dead ReLU units leave most of fc1's square
average at zero. Clamping it first to a floor whose root vanishes when eps is added changes no bit.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from reprodqn.dqn import fused_step
from reprodqn.dqn.settings import AgentSettings
from reprodqn.universal import optim


def exact_sqrt_floor(eps: float, scale: float = 1.0) -> float:
    """The largest clamp that cannot change fl(sqrt(v) / scale + eps) in float32:
    (ulp(eps) / 4 * scale)^2, so the root's share stays under a quarter ulp of eps
    (2^-64 for eps = 0.01 at scale 1); 0 when that underflows."""
    floor = float((np.spacing(np.float32(eps), dtype=np.float32) / 4 * scale) ** 2)
    return floor if floor >= np.finfo(np.float32).tiny else 0.0


def ieee_sqrt_(tensor: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root, in place. torch's CPU sqrt goes through MKL's
    vector math, whose float32 root is not correctly rounded and differs by vendor (an
    Intel Xeon at the portable floor missed the IEEE root on 17% of 2M values, AMD EPYC
    on others); numpy's is the sqrt instruction itself, the same bits on every x86 CPU.
    CUDA's root is correctly rounded already."""
    if tensor.device.type != "cpu":
        return tensor.sqrt_()
    values = tensor.numpy()
    np.sqrt(values, out=values)
    return tensor


def _state(optimizer: torch.optim.Optimizer, param: torch.Tensor, *names: str) -> dict:
    """The param's state, created on first use: a float32 step count and zeroed buffers."""
    state = optimizer.state[param]
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32)
        for name in names:
            state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state


class RMSprop(torch.optim.RMSprop):
    """torch.optim.RMSprop (uncentred, no momentum), the same arithmetic in the same order,
    the square average clamped to the exact floor before its root (module docstring).
    Bit-identical to torch's RMSprop with a correctly rounded root (tests/dqn/test_agent.py).
    On the CPU the step is one pass over memory (dqn.fused_step), with the same bits as
    torch's six kernels; `one_pass = False` runs those kernels instead (`reprodqn trace`
    does, to record each op)."""

    one_pass = True

    def __init__(self, params, lr: float, alpha: float, eps: float):
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, foreach=False)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            floor = exact_sqrt_floor(eps)
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = _state(self, param, "square_avg")
                grad, square_avg = param.grad, state["square_avg"]
                state["step"] += 1
                if self.one_pass and fused_step.fusable(param, grad, square_avg):
                    fused_step.rmsprop_step_(
                        param, grad, square_avg, alpha=alpha, eps=eps, lr=lr, floor=floor
                    )
                    continue
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                avg = ieee_sqrt_(square_avg.clamp_min(floor)).add_(eps)
                param.addcdiv_(grad, avg, value=-lr)


class CenteredRMSprop(torch.optim.Optimizer):
    """DeepMind's RMSProp for DQN (NeuralQLearner.lua, qLearnMinibatch):
    g = a g + (1 - a) dw;  g2 = a g2 + (1 - a) dw^2;  w -= lr dw / sqrt(g2 - g^2 + eps),
    with a = 0.95 and eps = 0.01 there: the constant is a minimum squared gradient inside
    the root, so the step is at most lr |dw| / sqrt(eps) and no root ever sees zero."""

    def __init__(self, params, lr: float, alpha: float, eps: float):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = _state(self, param, "square_avg", "grad_avg")
                grad = param.grad
                state["step"] += 1
                state["grad_avg"].mul_(alpha).add_(grad, alpha=1 - alpha)
                state["square_avg"].mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                variance = state["square_avg"].addcmul(
                    state["grad_avg"], state["grad_avg"], value=-1
                )
                param.addcdiv_(grad, ieee_sqrt_(variance.add_(eps)), value=-lr)


class Adam(torch.optim.Adam):
    """torch.optim.Adam (single-tensor path, no amsgrad, no weight decay), the same
    arithmetic in the same order, the second moment clamped to the exact floor for this
    step's bias correction before its root. Bit-identical to torch's Adam with a correctly
    rounded root (tests/dqn/test_optimizers.py)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float):
        super().__init__(params, lr=lr, betas=betas, eps=eps, foreach=False, fused=False)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = _state(self, param, "exp_avg", "exp_avg_sq")
                grad, exp_avg, exp_avg_sq = param.grad, state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1**step)
                correction2_sqrt = (1 - beta2**step) ** 0.5
                floor = exact_sqrt_floor(eps, correction2_sqrt)
                denom = ieee_sqrt_(exp_avg_sq.clamp_min(floor)).div_(correction2_sqrt).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-step_size)


def build_optimizer(
    parameters, agent_config: AgentSettings, numerics: str = "standard"
) -> torch.optim.Optimizer:
    """The optimizer `agent.optimizer` names, with its params: these classes, or in the
    universal mode reprodqn.universal's of the same name (the same rule in the spec's order)."""
    c = agent_config
    kinds = optim if numerics == "universal" else sys.modules[__name__]
    if c.optimizer == "rmsprop":
        return kinds.RMSprop(
            parameters, lr=c.learning_rate, alpha=c.rmsprop_alpha, eps=c.rmsprop_eps
        )
    if c.optimizer == "rmsprop_centered":
        return kinds.CenteredRMSprop(
            parameters, lr=c.learning_rate, alpha=c.rmsprop_alpha, eps=c.rmsprop_eps
        )
    return kinds.Adam(
        parameters, lr=c.learning_rate, betas=(c.adam_beta1, c.adam_beta2), eps=c.adam_eps
    )
