"""The one-pass RMSprop step (dqn.fused_step) gives the bits of torch's six kernels: over
values that reach each rounding (the fused multiply-add, the clamp, subnormal squares,
gradients of every magnitude), at sizes with and without a vector tail, step after step."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from reprodqn.dqn import fused_step
from reprodqn.dqn.network import build_q_network
from reprodqn.dqn.optimizers import RMSprop, exact_sqrt_floor, ieee_sqrt_
from tests.helpers import ROOT, cli_env

SETTINGS = {"alpha": 0.95, "eps": 0.01, "lr": 2.5e-4}  # params.yaml's authors' RMSprop


def torch_kernels_(param, grad, square_avg, *, alpha, eps, lr, floor) -> None:
    """RMSprop.step's torch path, written out: the reference the loop must match."""
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    param.addcdiv_(grad, ieee_sqrt_(square_avg.clamp_min(floor)).add_(eps), value=-lr)


def gradients(rng: np.random.Generator, size: int) -> torch.Tensor:
    """Magnitudes from 1e-30 to 10 (squares from subnormal to large), a third exactly 0."""
    values = rng.standard_normal(size) * 10.0 ** rng.uniform(-30, 1, size)
    values[rng.random(size) < 1 / 3] = 0.0
    return torch.from_numpy(values.astype(np.float32))


def bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.numpy().view(np.int32)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 100_003])
@pytest.mark.parametrize("eps", [0.01, 1e-6])
def test_one_pass_gives_the_bits_of_torchs_kernels(size, eps):
    settings = {**SETTINGS, "eps": eps, "floor": exact_sqrt_floor(eps)}
    rng = np.random.default_rng(size)
    start = torch.from_numpy(rng.standard_normal(size).astype(np.float32))
    ours = (start.clone(), torch.zeros(size))
    theirs = (start.clone(), torch.zeros(size))
    for _ in range(20):
        grad = gradients(rng, size)
        fused_step.rmsprop_step_(ours[0], grad, ours[1], **settings)
        torch_kernels_(theirs[0], grad, theirs[1], **settings)
        assert np.array_equal(bits(ours[1]), bits(theirs[1])), "square average"
        assert np.array_equal(bits(ours[0]), bits(theirs[0])), "parameter"
    assert not torch.equal(ours[0], start)  # the steps moved it


# what numba compiles the loop for besides this machine: the bits must not depend on it
# (an Intel AVX2 machine gets the first; a CPU without FMA the second, whose fma is libm's)
TARGETS = {  # target: (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES, instructions its code must lack)
    "avx2-fma": ("haswell", "+avx,+avx2,+fma,+sse4.2,+sse4.1,+ssse3,+sse3,+sse2,+sse", "zmm"),
    "sse2-libm-fma": ("x86-64", "+sse2", "vfmadd"),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_bits_do_not_depend_on_the_instruction_set_the_loop_is_compiled_for(target):
    name, features, absent = TARGETS[target]
    check = (
        "from tests.dqn.test_fused_step import test_one_pass_gives_the_bits_of_torchs_kernels "
        "as check; check(100_003, 0.01); check(9, 1e-6)\n"
        "from reprodqn.dqn.fused_step import _rmsprop_loop\n"
        "print(*_rmsprop_loop().inspect_asm().values())"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(NUMBA_CPU_NAME=name, NUMBA_CPU_FEATURES=features),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sqrt" in result.stdout and absent not in result.stdout  # compiled for the target


def test_the_optimizer_takes_the_same_steps_in_one_pass_as_in_torchs_kernels():
    """RMSprop on the Nature network's parameters, each way, from one start."""
    nets = [build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(0)) for _ in "ab"]
    optimizers = [RMSprop(net.parameters(), **SETTINGS) for net in nets]
    optimizers[1].one_pass = False
    rng = np.random.default_rng(0)
    for _ in range(5):
        grads = [gradients(rng, p.numel()).view(p.shape) for p in nets[0].parameters()]
        for net, optimizer in zip(nets, optimizers, strict=True):
            for param, grad in zip(net.parameters(), grads, strict=True):
                param.grad = grad.clone()
            optimizer.step()
    states = [opt.state_dict()["state"] for opt in optimizers]
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)
    assert all(
        torch.equal(states[0][k]["square_avg"], states[1][k]["square_avg"]) for k in states[0]
    )


def test_what_the_loop_cannot_take_goes_through_torchs_kernels(monkeypatch):
    assert fused_step.fusable(torch.zeros(3), torch.zeros(3))
    assert not fused_step.fusable(torch.zeros(3, dtype=torch.float64))
    assert not fused_step.fusable(torch.zeros(4, 4).t())  # not contiguous
    monkeypatch.setattr(fused_step, "_rmsprop_loop", lambda: None)  # numba not installed
    assert not fused_step.fusable(torch.zeros(3))
