"""The universal optimizers against the spec's reference, step by step, and the layers'
cached transposed weight refreshed by a step."""

from __future__ import annotations

import copy

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


def test_adam_resumed_from_its_state_dict_keeps_its_binary64_powers():
    """torch's loader would cast them to float32, and the resumed run would part."""
    rng = np.random.default_rng(5)
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(7).astype(f32)))]
    optimizer = optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(3):
        params[0].grad = torch.from_numpy(rng.standard_normal(7).astype(f32))
        optimizer.step()
    saved = copy.deepcopy(optimizer.state_dict())  # as a resume point holds it: a copy
    twin = [torch.nn.Parameter(params[0].detach().clone())]
    resumed = optim.Adam(twin, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    resumed.load_state_dict(saved)
    state = resumed.state[twin[0]]
    assert state["beta2_power"].dtype == torch.float64
    assert float(state["beta2_power"]) == 0.999**3 and float(state["beta1_power"]) == 0.9**3
    grad = torch.from_numpy(rng.standard_normal(7).astype(f32))
    params[0].grad, twin[0].grad = grad.clone(), grad.clone()
    optimizer.step()
    resumed.step()
    assert same(params[0].detach().numpy(), twin[0].detach().numpy())


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_gradient_clipping_is_the_specs_lane_order_and_torchs_rule(max_norm):
    """The norm over 256 fma lanes summed in order (the spec, written here in numpy from the
    reference's fma), and torch's rule: scaled by fl(max / fl(norm + 1e-6)) only below 1."""
    rng = np.random.default_rng(9)
    shapes = [(300, 7), (5,), (1000,)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    grads = [(rng.standard_normal(s) * 0.1).astype(f32) for s in shapes]
    for param, grad in zip(params, grads, strict=True):
        param.grad = torch.from_numpy(grad.copy())
    norm = optim.clip_grad_norm_(params, max_norm)
    lanes = np.zeros(optim.NORM_LANES, f32)
    for grad in grads:
        flat = grad.reshape(-1)
        for start in range(0, flat.size, optim.NORM_LANES):
            chunk = flat[start : start + optim.NORM_LANES]
            lanes[: chunk.size] = ref.fma32(chunk, chunk, lanes[: chunk.size])
    total = f32(0.0)
    for lane in lanes:
        total = f32(total + lane)
    assert same(norm.numpy(), np.sqrt(total))
    factor = f32(f32(max_norm) / f32(np.sqrt(total) + f32(1e-6)))
    for param, grad in zip(params, grads, strict=True):
        expected = grad * factor if factor < 1 else grad
        assert same(param.grad.numpy(), expected)
    theirs = torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(torch.zeros(1))], 1.0)
    assert float(theirs) == 0.0  # (torch's own, for the rule: no gradients, norm 0)
    assert abs(float(norm) - np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))) < 1e-4
