"""The universal optimizers: the authors' RMSprop, DeepMind's centred RMSprop and Adam, each
step one pass per parameter in the spec's order (docs/universal-numerics.md), compiled
like the layers' kernels (backend.py: numba on a CPU, Triton on a GPU). Hyperparameters
enter as the binary32 nearest them; Adam's bias corrections are kept in binary64 as
running products (beta ** t through libm's pow is not correctly rounded everywhere) and
their root is the correctly rounded math.sqrt.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from reprodqn.universal.backend import checked, kernels_for
from reprodqn.universal.guard import unwatched
from reprodqn.universal.reference import add_sequence

f32 = np.float32


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().view(-1)


def _without_dynamo(name: str):
    """torch.optim.Optimizer's method without its torch._disable_dynamo wrapper, which
    imports torch._dynamo (1.3 s of every run's start) to keep torch.compile out of it:
    these optimizers' steps are numba's, never compiled."""
    method = getattr(torch.optim.Optimizer, name)
    return getattr(method, "__wrapped__", method)


class _Universal(torch.optim.Optimizer):
    """Per parameter: a float32 step count and zeroed float32 buffers, then `_update`."""

    buffers: tuple[str, ...] = ()
    add_param_group = _without_dynamo("add_param_group")
    zero_grad = _without_dynamo("zero_grad")
    state_dict = _without_dynamo("state_dict")
    load_state_dict = _without_dynamo("load_state_dict")

    @torch.no_grad()
    @unwatched
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
                torch.autograd.graph.increment_version(param)  # written by a kernel
                checked(_flat(param), f"{type(self).__name__} step")

    def _update(self, group, param, state) -> None:
        raise NotImplementedError


class RMSprop(_Universal):
    """s = fma(fl((1-a) g), g, fl(s a)); p = fl(p + fl(fl(-lr g) / fl(sqrt(s) + eps)))."""

    buffers = ("square_avg",)

    def __init__(self, params, lr: float, alpha: float, eps: float):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    def _update(self, group, param, state):
        alpha = group["alpha"]
        kernels_for(param).rmsprop(
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
        kernels_for(param).rmsprop_centered(
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

    @unwatched  # torch's cast of the powers is discarded: under the watch it was refused
    def load_state_dict(self, state_dict: dict) -> None:
        """torch's loader casts every state tensor but `step` to the parameter's dtype: the
        binary64 powers are put back as they were saved."""
        powers = {
            index: {name: value.clone() for name, value in slot.items() if name.endswith("_power")}
            for index, slot in state_dict["state"].items()
        }
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in powers.items():
            self.state[params[int(index)]].update(saved)

    def _update(self, group, param, state):
        beta1, beta2 = group["betas"]
        for name, beta in (("beta1_power", beta1), ("beta2_power", beta2)):
            previous = state.get(name, torch.ones((), dtype=torch.float64))
            state[name] = torch.tensor(float(previous) * beta, dtype=torch.float64)
        step_size = group["lr"] / (1 - float(state["beta1_power"]))
        root_c2 = math.sqrt(1 - float(state["beta2_power"]))
        kernels_for(param).adam(
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


NORM_LANES = 256


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """Scale the gradients by fl(max_norm / fl(norm + 1e-6)) where that is below 1, as
    torch.nn.utils.clip_grad_norm_ does, with the norm in the spec's order: 256 lanes, each
    element i of each gradient (parameters in order) folded into lane i mod 256 by fma, the
    lanes summed in order from +0, then the correctly rounded root. Returns the norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    lanes = torch.zeros(NORM_LANES, device=grads[0].device)
    for grad in grads:
        kernels_for(grad).sum_squares(_flat(grad), lanes)
    norm = np.sqrt(add_sequence(lanes.cpu().numpy()))
    factor = f32(f32(max_norm) / f32(norm + f32(1e-6)))
    if factor < 1:
        for grad in grads:
            kernels_for(grad).scale(_flat(grad), factor)
            checked(_flat(grad), "gradient clipping")
    return torch.tensor(norm)
