"""The universal numerics for your own script (`from reprodqn.exact import universal`):
build a network of these layers, train it with these optimizers and losses in a process
set up with exact.setup(numerics="universal"), and its chain is the same on every CPU,
thread count and torch version. From setup on, any op they do not cover is refused in one
line naming it (`strict()` watches a stretch of a script not set up so); `outside("what")`
declares a part that neither acts nor learns, which torch's kernels may compute.

    process = exact.setup(numerics="universal")
    net = nn.Sequential(universal.Conv2d(4, 16, 8, 4), universal.ReLU(), nn.Flatten(),
                        universal.Linear(16 * 20 * 20, 4))
    universal.init_(net, generator)
    optimizer = universal.Adam(net.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    loss = universal.regression_loss(net(universal.scale_frames(frames)), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""

from __future__ import annotations

import importlib
from typing import Any

# where each public name lives; loaded on first use, so importing reprodqn.exact (which
# offers this module) before `import torch` loads no torch (the CPU floor must come first)
WHERE = {
    "Conv2d": "layers",
    "Linear": "layers",
    "ReLU": "layers",
    "check_supported": "layers",
    "fork": "layers",
    "dueling": "layers",
    "init_uniform_": "layers",
    "scale_frames": "layers",
    "NumericsError": "errors",
    "greedy_actions": "learning",
    "max_q": "learning",
    "q_loss": "learning",
    "regression_loss": "learning",
    "Adam": "optim",
    "CenteredRMSprop": "optim",
    "RMSprop": "optim",
    "clip_grad_norm_": "optim",
    "log_softmax": "policy",
    "sample": "policy",
    "normalize": "policy",
    "ppo_loss": "policy",
    "exp32": "rounding",
    "log32": "rounding",
    "SPEC_VERSION": "reference",
    "strict": "guard",
    "outside": "guard",
    "record": "record",
}
RENAMED = {"record": "universal_record"}
__all__ = sorted([*WHERE, "configure", "init_"])


def __getattr__(name: str) -> Any:
    if name not in WHERE:
        raise AttributeError(f"reprodqn.exact.universal has no {name!r}")
    module = importlib.import_module(f"reprodqn.universal.{WHERE[name]}")
    return getattr(module, RENAMED.get(name, name))


def configure(threads: int = 1) -> dict:
    """The backend's threads (they split outputs, never a sum) and the check that denormals
    are kept; returns the record to keep beside the run's conditions."""
    from reprodqn.universal import cpu

    return cpu.configure(threads)


def init_(module, generator) -> None:
    """Every universal layer's weight and bias U(-b, b), b = 1/sqrt(fan_in) (torch's default
    scheme), in module order, from `generator` alone, in the spec's arithmetic."""
    from reprodqn.universal.layers import Conv2d, Linear, check_supported, init_uniform_

    check_supported(module)
    for layer in module.modules():
        if isinstance(layer, Conv2d | Linear):
            fan_in = layer.weight[0].numel()
            init_uniform_(layer.weight, fan_in, generator)
            if layer.bias is not None:
                init_uniform_(layer.bias, fan_in, generator)
