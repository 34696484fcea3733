"""The authors' RMSprop step as one pass over memory on the CPU, bit for bit torch's.

torch runs the step as six elementwise kernels (mul_, addcmul_, clamp_min, the root, add_,
addcdiv_), each a pass over the 1.7M parameters of the Nature network: about 8% of an
update. This loop does the same operations, in the same order and with the same roundings,
in one pass. Written by hand for speed, with numba, because no torch op fuses them
without changing a rounding (the `foreach` optimizer does, and torch.compile may contract
a multiply and an add into one FMA). The roundings, as torch 2.13's CPU kernels at the
portable floor make them:

- mul_: s * alpha, rounded;
- addcmul_(g, g, value=1 - alpha): fma((1 - alpha) * g, g, s), the product of value and
  the first factor rounded, then one fused multiply-add (ATen's Vectorized fmadd);
- clamp_min(floor), then the correctly rounded root (the sqrt instruction), then + eps;
- addcdiv_(g, avg, value=-lr): p + (-lr * g) / avg, each step rounded.

Every one is a correctly rounded IEEE-754 operation, which every x86-64 CPU computes
alike at any vector width (the fma in hardware where there is FMA3, in libm where not), so
the loop's bits depend neither on the vendor nor on the instruction set numba compiles it
for. `tests/dqn/test_fused_step.py` holds it to torch's kernels over values that reach
each rounding. On a GPU, and without numba, the optimizer runs torch's kernels: the same
bits, slower.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch


@functools.cache
def _rmsprop_loop() -> Callable | None:
    """The loop, compiled on its first call; None without numba (a lean install, such as a
    GPU machine carrying only what it needs): torch's kernels then run, with the same bits.
    numba is imported here, not at the top, so a GPU run never loads it."""
    try:
        from numba import njit, types
        from numba.core.extending import intrinsic
    except ImportError:
        return None

    @intrinsic
    def fma32(typingctx, a, b, c):
        """LLVM's fma: one rounding, as ATen's Vectorized fmadd (numba exposes no fma)."""
        signature = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, sig, args):
            return builder.fma(*args)

        return signature, codegen

    # fastmath off: no contraction or reassociation; error_model numpy: no division check,
    # so the loop vectorizes
    @njit(fastmath=False, nogil=True, error_model="numpy")
    def loop(param, grad, square_avg, alpha, one_minus_alpha, floor, eps, neg_lr):
        for i in range(param.size):
            g = grad[i]
            s = fma32(one_minus_alpha * g, g, square_avg[i] * alpha)
            square_avg[i] = s
            root = np.sqrt(floor if s < floor else s)  # clamp_min; a NaN passes, as in torch
            param[i] = param[i] + (neg_lr * g) / (root + eps)

    return loop


def fusable(*tensors: torch.Tensor) -> bool:
    """The loop's case: contiguous float32 on the CPU, and numba installed."""
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors
    ) and (_rmsprop_loop() is not None)


def rmsprop_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    square_avg: torch.Tensor,
    *,
    alpha: float,
    eps: float,
    lr: float,
    floor: float,
) -> None:
    """One RMSprop step of one parameter, in place, with torch's scalars as float32."""
    loop = _rmsprop_loop()
    assert loop is not None, "fusable() is False without numba"
    f32 = np.float32
    loop(
        param.detach().view(-1).numpy(),
        grad.view(-1).numpy(),
        square_avg.view(-1).numpy(),
        f32(alpha),
        f32(1 - alpha),
        f32(floor),
        f32(eps),
        f32(-lr),
    )
