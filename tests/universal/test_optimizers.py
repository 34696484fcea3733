"""The universal optimizers against the spec's reference, step by step, and the layers'
cached transposed weight refreshed by a step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn.universal import layers, optim
from reprodqn.universal import reference as ref

f32 = np.float32


def same(a, b) -> bool:
    return np.array_equal(np.asarray(a, f32).view(np.uint32), np.asarray(b, f32).view(np.uint32))


def _steps(kind: str, steps: int = 4):
    rng = np.random.default_rng(11)
    start = rng.standard_normal(1001).astype(f32)
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    if kind == "rmsprop":
        optimizer = optim.RMSprop([param], lr=0.00025, alpha=0.95, eps=0.01)
    elif kind == "rmsprop_centered":
        optimizer = optim.CenteredRMSprop([param], lr=0.00025, alpha=0.95, eps=0.01)
    else:
        optimizer = optim.Adam([param], lr=1e-4, betas=(0.9, 0.999), eps=1.5e-4)
    expected = {"p": start.copy(), "a": np.zeros_like(start), "b": np.zeros_like(start)}
    powers = [1.0, 1.0]
    for _ in range(steps):
        grad = (rng.standard_normal(1001) * rng.choice([1e-6, 1e-2, 1.0], 1001)).astype(f32)
        grad[:3] = 0.0
        param.grad = torch.from_numpy(grad.copy())
        optimizer.step()
        e = expected
        if kind == "rmsprop":
            e["p"], e["a"] = ref.rmsprop(e["p"], grad, e["a"], 0.00025, 0.95, 0.01)
        elif kind == "rmsprop_centered":
            e["p"], e["a"], e["b"] = ref.rmsprop_centered(
                e["p"], grad, e["a"], e["b"], 0.00025, 0.95, 0.01
            )
        else:
            powers = [powers[0] * 0.9, powers[1] * 0.999]
            e["p"], e["a"], e["b"] = ref.adam(
                e["p"], grad, e["a"], e["b"], 1e-4, (0.9, 0.999), 1.5e-4, tuple(powers)
            )
    return param.detach().numpy(), expected["p"]


@pytest.mark.parametrize("kind", ["rmsprop", "rmsprop_centered", "adam"])
def test_each_optimizer_is_the_reference(kind):
    ours, expected = _steps(kind)
    assert same(ours, expected)


def test_a_step_refreshes_the_cached_transposed_weight():
    layer = layers.Linear(5, 3)
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 5)).astype(f32))
    layer(x).sum  # noqa: B018 (the cache is filled)
    optimizer = optim.RMSprop(layer.parameters(), lr=0.1, alpha=0.95, eps=0.01)
    for p in layer.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    assert same(layer(x).detach().numpy(), ref.linear(x.numpy(), w, b))
