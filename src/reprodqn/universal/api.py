"""The universal numerics for your own script (`from reprodqn.exact import universal`):
build a network of these layers, train it with these optimizers and losses inside
`strict()`, and its chain is the same on every CPU, thread count and torch version.
Any op they do not cover is refused inside `strict()`, in one line naming it.

    from reprodqn.exact import universal
    universal.configure(threads=1)
    net = nn.Sequential(universal.Conv2d(4, 16, 8, 4), universal.ReLU(), nn.Flatten(),
                        universal.Linear(16 * 20 * 20, 4))
    universal.init_(net, generator)
    optimizer = universal.Adam(net.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    with universal.strict():
        loss = universal.regression_loss(net(universal.scale_frames(frames)), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
"""

from __future__ import annotations

import torch
from torch import nn

from reprodqn.universal import cpu
from reprodqn.universal.guard import UniversalOnly as strict
from reprodqn.universal.layers import (
    Conv2d,
    Linear,
    NumericsError,
    ReLU,
    check_supported,
    init_uniform_,
    scale_frames,
)
from reprodqn.universal.learning import greedy_actions, max_q, q_loss, regression_loss
from reprodqn.universal.optim import Adam, CenteredRMSprop, RMSprop
from reprodqn.universal.record import universal_record as record
from reprodqn.universal.reference import SPEC_VERSION

__all__ = [
    "SPEC_VERSION",
    "Adam",
    "CenteredRMSprop",
    "Conv2d",
    "Linear",
    "NumericsError",
    "RMSprop",
    "ReLU",
    "check_supported",
    "configure",
    "greedy_actions",
    "init_",
    "init_uniform_",
    "max_q",
    "q_loss",
    "record",
    "regression_loss",
    "scale_frames",
    "strict",
]


def configure(threads: int = 1) -> dict:
    """The backend's threads (they split outputs, never a sum) and the check that denormals
    are kept; returns the record to keep beside the run's conditions."""
    return cpu.configure(threads)


def init_(module: nn.Module, generator: torch.Generator) -> None:
    """Every universal layer's weight and bias U(-b, b), b = 1/sqrt(fan_in) (torch's default
    scheme), in module order, from `generator` alone, in the spec's arithmetic."""
    check_supported(module)
    for layer in module.modules():
        if isinstance(layer, Conv2d | Linear):
            fan_in = layer.weight[0].numel()
            init_uniform_(layer.weight, fan_in, generator)
            if layer.bias is not None:
                init_uniform_(layer.bias, fan_in, generator)
