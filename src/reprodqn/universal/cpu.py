"""The universal kernels on a CPU, compiled by numba and llvmlite (LLVM) for the machine at
hand.

Written by hand because no library computes a product in one written order: BLAS, oneDNN
and MKL block and split their sums differently per instruction set. Each output here is
one chain of LLVM `fma` calls over k ascending from +0 (reference.chain); the loop over
outputs is the one that runs in vector lanes and threads, so neither the vector width (SSE,
AVX2, AVX-512, NEON) nor the thread count touches a sum. numba adds no fast-math flags
(`fastmath=False`): LLVM neither contracts a separate multiply and add into an fma nor
reorders a sum, and `llvm.fma` is correctly rounded everywhere (in libm where the CPU has
no fma). Denormals are kept: `denormals_kept()` checks that nothing has set FTZ/DAZ.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from reprodqn.universal import product, tiles
from reprodqn.universal.threads import apply as apply_threads
from reprodqn.universal.threads import set_threads, threads

__all__ = ["configure", "denormals_kept", "kernels", "set_threads", "threads"]


@functools.cache
def fma32():
    """llvm.fma.f32 as a numba intrinsic: a * b + c with one rounding (numba exposes no fma)."""
    from numba import types
    from numba.core.extending import intrinsic

    from reprodqn.universal.jit import named

    @intrinsic
    def fma32(typingctx, a, b, c):
        signature = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, sig, args):
            return builder.fma(*args)

        return signature, codegen

    return named(fma32, "cpu.fma32")


@functools.cache
def _sums(parallel: bool) -> dict:
    """The biases and the bias gradients' sums."""
    from numba import prange

    from reprodqn.universal.jit import kernel

    jit = kernel(parallel=parallel)
    serial = kernel

    @jit
    def add_row_bias(out, bias):
        """out[n, m, :] += bias[m]: one rounded add (a convolution's channel bias)."""
        batch, rows, width = out.shape
        for job in prange(batch * rows):
            n = job // rows
            m = job - n * rows
            b = bias[m]
            for j in range(width):
                out[n, m, j] = out[n, m, j] + b

    @serial
    def add_column_bias(out, bias):
        """out[n, :] += bias: one rounded add (a linear layer's bias)."""
        for n in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[n, j] = out[n, j] + bias[j]

    @serial
    def sum_rows(terms, out):
        """out[:] = sum over rows ascending from +0, one rounded add each."""
        for j in range(out.shape[0]):
            out[j] = np.float32(0.0)
        for n in range(terms.shape[0]):
            for j in range(out.shape[0]):
                out[j] = out[j] + terms[n, j]

    @jit
    def sum_channel_major(grad, out):
        """out[c] = sum over (n, p) ascending of grad[n, c, p], from +0."""
        batch, channels, width = grad.shape
        for c in prange(channels):
            acc = np.float32(0.0)
            for n in range(batch):
                for p in range(width):
                    acc = acc + grad[n, c, p]
            out[c] = acc

    return {
        "add_row_bias": add_row_bias,
        "add_column_bias": add_column_bias,
        "sum_rows": sum_rows,
        "sum_channel_major": sum_channel_major,
    }


@functools.cache
def _elementwise(parallel: bool) -> dict:
    """The input scaling, ReLU and its gradient, and a plain fma."""
    from numba import prange

    from reprodqn.universal.jit import kernel

    jit = kernel(parallel=parallel)
    serial = kernel
    fma = fma32()

    @jit
    def scale_frames(frames, out):
        """out = fl32(pixel / 255), the pixel converted exactly."""
        flat_in, flat_out = frames.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            flat_out[i] = np.float32(flat_in[i]) / np.float32(255.0)

    @jit
    def relu(x, out):
        """out = x where x > 0, else +0."""
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            v = flat_in[i]
            flat_out[i] = v if v > np.float32(0.0) else np.float32(0.0)

    @jit
    def relu_grad(grad, out, grad_x):
        """grad_x = grad where out > 0, else +0."""
        g, o, gx = grad.reshape(-1), out.reshape(-1), grad_x.reshape(-1)
        for i in prange(g.size):
            gx[i] = g[i] if o[i] > np.float32(0.0) else np.float32(0.0)

    @serial
    def holds_nan(values):
        """Whether any value is a NaN: one pass, nothing allocated (a NaN is not equal to
        itself)."""
        flat = values.reshape(-1)
        found = False
        for i in range(flat.size):
            found |= flat[i] != flat[i]
        return found

    @serial
    def fma_elementwise(a, b, c, out):
        for i in range(out.size):
            out[i] = fma(a[i], b[i], c[i])

    return {
        "scale_frames": scale_frames,
        "relu": relu,
        "relu_grad": relu_grad,
        "fma_elementwise": fma_elementwise,
        "holds_nan": holds_nan,
    }


@functools.cache
def _optimizers() -> dict:
    """One pass per parameter in the spec's order (optim.py says which)."""
    from reprodqn.universal.jit import kernel as jit

    fma = fma32()

    @jit
    def rmsprop(param, grad, square_avg, alpha, one_minus_alpha, eps, neg_lr):
        for i in range(param.size):
            g = grad[i]
            s = fma(one_minus_alpha * g, g, square_avg[i] * alpha)
            square_avg[i] = s
            param[i] = param[i] + (neg_lr * g) / (np.sqrt(s) + eps)

    @jit
    def rmsprop_centered(param, grad, grad_avg, square_avg, alpha, one_minus_alpha, eps, neg_lr):
        for i in range(param.size):
            g = grad[i]
            mean = fma(one_minus_alpha, g, grad_avg[i] * alpha)
            s = fma(one_minus_alpha * g, g, square_avg[i] * alpha)
            grad_avg[i], square_avg[i] = mean, s
            param[i] = param[i] + (neg_lr * g) / np.sqrt(fma(-mean, mean, s) + eps)

    @jit
    def adam(
        param, grad, exp_avg, exp_avg_sq, one_minus_b1, beta2, one_minus_b2, root_c2, eps, neg_step
    ):
        for i in range(param.size):
            g = grad[i]
            m = fma(one_minus_b1, g - exp_avg[i], exp_avg[i])
            v = fma(one_minus_b2 * g, g, exp_avg_sq[i] * beta2)
            exp_avg[i], exp_avg_sq[i] = m, v
            param[i] = param[i] + (neg_step * m) / (np.sqrt(v) / root_c2 + eps)

    @jit
    def sum_squares(grad, lanes):
        """lanes[i mod L] = fma(g_i, g_i, lanes[i mod L]), i ascending (the gradient norm)."""
        width = lanes.size
        for i in range(grad.size):
            j = i % width
            lanes[j] = fma(grad[i], grad[i], lanes[j])

    @jit
    def scale(values, factor):
        for i in range(values.size):
            values[i] = values[i] * factor

    return {
        "rmsprop": rmsprop,
        "rmsprop_centered": rmsprop_centered,
        "adam": adam,
        "sum_squares": sum_squares,
        "scale": scale,
    }


def kernels() -> SimpleNamespace:
    """The compiled kernels for the thread count set (numba imported and compiled on first
    use, cached on disk). At one thread they are compiled without numba's parallel layer,
    so no pool of threads waits, spinning, on a core another process needs; threads change
    speed only."""
    return _kernels(threads() > 1)


@functools.cache
def _kernels(parallel: bool) -> SimpleNamespace:
    found = SimpleNamespace(
        fma32=fma32(),
        gemm=functools.partial(product.gemm, parallel=parallel),
        **_sums(parallel),
        **_elementwise(parallel),
        **_optimizers(),
    )
    if parallel:
        apply_threads()  # numba may start its pool while compiling: the count set, again
    return found


def denormals_kept() -> bool:
    """False where something in the process flushes denormals (FTZ/DAZ in MXCSR): the
    smallest normal halved must stay a denormal through the kernels' fma."""
    tiny = np.full(1, np.finfo(np.float32).tiny, np.float32)
    half, zero, out = np.full(1, 0.5, np.float32), np.zeros(1, np.float32), np.ones(1, np.float32)
    kernels().fma_elementwise(tiny, half, zero, out)
    return bool(out[0] == tiny[0] * np.float32(0.5) and out[0] != 0)


def configure(threads: int) -> dict:
    """Set up the backend and say what it is: numba's threads (which split outputs, never
    a sum; at one, no thread pool at all) and a check that denormals are kept; the record
    for the run's conditions."""
    import numba

    from reprodqn.universal.errors import NumericsError
    from reprodqn.universal.record import universal_record

    set_threads(threads)
    if not denormals_kept():
        raise NumericsError(
            "compute.numerics universal: this process flushes denormals to zero (FTZ/DAZ set "
            "by a library loaded before reprodqn); the universal chain needs them kept"
        )
    tile = tiles.tile()
    backend = f"cpu: numba {numba.__version__}, {tile.lanes}-lane tiles for {tile.cpu}"
    return {**universal_record("universal"), "universal_backend": backend}
