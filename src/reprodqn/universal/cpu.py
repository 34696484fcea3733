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

from reprodqn.universal import tiles


@functools.cache
def fma32():
    """llvm.fma.f32 as a numba intrinsic: a * b + c with one rounding (numba exposes no fma)."""
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def fma32(typingctx, a, b, c):
        signature = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, sig, args):
            return builder.fma(*args)

        return signature, codegen

    return fma32


# fastmath off: no contraction or reassociation; error_model numpy: no division check
JIT = {"fastmath": False, "error_model": "numpy", "nogil": True, "cache": True}


@functools.cache
def _sums() -> dict:
    """The biases and the bias gradients' sums."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)

    @jit(parallel=True)
    def add_row_bias(out, bias):
        """out[n, m, :] += bias[m]: one rounded add (a convolution's channel bias)."""
        batch, rows, width = out.shape
        for job in prange(batch * rows):
            n = job // rows
            m = job - n * rows
            b = bias[m]
            for j in range(width):
                out[n, m, j] = out[n, m, j] + b

    @jit
    def add_column_bias(out, bias):
        """out[n, :] += bias: one rounded add (a linear layer's bias)."""
        for n in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[n, j] = out[n, j] + bias[j]

    @jit
    def sum_rows(terms, out):
        """out[:] = sum over rows ascending from +0, one rounded add each."""
        for j in range(out.shape[0]):
            out[j] = np.float32(0.0)
        for n in range(terms.shape[0]):
            for j in range(out.shape[0]):
                out[j] = out[j] + terms[n, j]

    @jit(parallel=True)
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
def _windows():
    """A convolution's windows as rows (a copy), and the input gradient from theirs."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)

    @jit(parallel=True)
    def col2im(dcols, grad_x, stride):
        """grad_x[n, c] = for (ky, kx) ascending, from +0: + dcols[n, oy, ox, c, ky, kx] at
        the pixels that window position reads."""
        batch, out_h, out_w, channels, kernel, _ = dcols.shape
        for job in prange(batch * channels):
            n = job // channels
            c = job - n * channels
            plane = grad_x[n, c]
            for y in range(plane.shape[0]):
                for x in range(plane.shape[1]):
                    plane[y, x] = np.float32(0.0)
            for ky in range(kernel):
                for kx in range(kernel):
                    for oy in range(out_h):
                        for ox in range(out_w):
                            y, x = oy * stride + ky, ox * stride + kx
                            plane[y, x] = plane[y, x] + dcols[n, oy, ox, c, ky, kx]

    @jit(parallel=True)
    def im2col(x, windows, stride):
        """windows[n, oy, ox, c, ky, kx] = x[n, c, oy*stride + ky, ox*stride + kx]: a copy."""
        batch, out_h, out_w, channels, kernel, _ = windows.shape
        for job in prange(batch * out_h):
            n = job // out_h
            oy = job - n * out_h
            for ox in range(out_w):
                for c in range(channels):
                    for ky in range(kernel):
                        for kx in range(kernel):
                            windows[n, oy, ox, c, ky, kx] = x[
                                n, c, oy * stride + ky, ox * stride + kx
                            ]

    return col2im, im2col


@functools.cache
def _elementwise() -> dict:
    """The input scaling, ReLU and its gradient, and a plain fma."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)
    fma = fma32()

    @jit(parallel=True)
    def scale_frames(frames, out):
        """out = fl32(pixel / 255), the pixel converted exactly."""
        flat_in, flat_out = frames.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            flat_out[i] = np.float32(flat_in[i]) / np.float32(255.0)

    @jit(parallel=True)
    def relu(x, out):
        """out = x where x > 0, else +0."""
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            v = flat_in[i]
            flat_out[i] = v if v > np.float32(0.0) else np.float32(0.0)

    @jit(parallel=True)
    def relu_grad(grad, out, grad_x):
        """grad_x = grad where out > 0, else +0."""
        g, o, gx = grad.reshape(-1), out.reshape(-1), grad_x.reshape(-1)
        for i in prange(g.size):
            gx[i] = g[i] if o[i] > np.float32(0.0) else np.float32(0.0)

    @jit
    def fma_elementwise(a, b, c, out):
        for i in range(out.size):
            out[i] = fma(a[i], b[i], c[i])

    return {
        "scale_frames": scale_frames,
        "relu": relu,
        "relu_grad": relu_grad,
        "fma_elementwise": fma_elementwise,
    }


@functools.cache
def _optimizers() -> dict:
    """One pass per parameter in the spec's order (optim.py says which)."""
    from numba import njit

    fma = fma32()
    jit = functools.partial(njit, **JIT)

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


@functools.cache
def kernels() -> SimpleNamespace:
    """The compiled kernels (numba imported and compiled on first use, cached on disk),
    with as many threads as torch was given (an evaluation worker's, say) until
    `set_threads` says otherwise: threads change speed only."""
    import torch

    set_threads(torch.get_num_threads())
    col2im, im2col = _windows()
    return SimpleNamespace(
        fma32=fma32(),
        col2im=col2im,
        im2col=im2col,
        **_sums(),
        **_elementwise(),
        **_optimizers(),
    )


@functools.cache
def _tiled():
    """The product's driver: every (sample, column panel, row block) job one register tile
    (tiles.py), the jobs split among numba's threads. A block or panel at the edge is
    copied into a zero-padded tile first: its padding fills lanes no output reads. Not
    cached on disk: it calls the tile by its address in this process."""
    from numba import njit, prange

    kernel = tiles.tile()
    call, tile_rows, tile_columns = kernel.function, kernel.rows, kernel.columns

    @njit(parallel=True, fastmath=False, error_model="numpy", nogil=True)
    def tiled(a, b, out):
        batch, rows, width = out.shape
        depth = a.shape[2]
        blocks = (rows + tile_rows - 1) // tile_rows
        panels = (width + tile_columns - 1) // tile_columns
        for job in prange(batch * panels * blocks):
            n = job // (panels * blocks)
            panel = (job - n * panels * blocks) // blocks
            m = (job - n * panels * blocks - panel * blocks) * tile_rows
            j = panel * tile_columns
            a_n = a[n if a.shape[0] > 1 else 0]
            b_n = b[n if b.shape[0] > 1 else 0]
            block_rows = min(tile_rows, rows - m)
            panel_columns = min(tile_columns, width - j)
            if block_rows == tile_rows and panel_columns == tile_columns:
                call(
                    a_n[m:].ctypes.data,
                    depth,
                    b_n[:, j:].ctypes.data,
                    width,
                    out[n, m:, j:].ctypes.data,
                    width,
                    depth,
                )
                continue
            a_at, a_step = a_n[m:].ctypes.data, depth
            if block_rows < tile_rows:  # only the edge is copied, padded with zero rows
                a_tile = np.zeros((tile_rows, depth), np.float32)
                a_tile[:block_rows] = a_n[m : m + block_rows]
                a_at = a_tile.ctypes.data
            b_at, b_step = b_n[:, j:].ctypes.data, width
            if panel_columns < tile_columns:
                b_tile = np.zeros((depth, tile_columns), np.float32)
                b_tile[:, :panel_columns] = b_n[:, j : j + panel_columns]
                b_at, b_step = b_tile.ctypes.data, tile_columns
            c_tile = np.empty((tile_rows, tile_columns), np.float32)
            call(a_at, a_step, b_at, b_step, c_tile.ctypes.data, tile_columns, depth)
            out[n, m : m + block_rows, j : j + panel_columns] = c_tile[:block_rows, :panel_columns]

    return tiled


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out[n] = a[n or 0] @ b[n or 0], each output one fma chain over k ascending from +0
    (reference.chain). a (A, M, K), b (B, K, N), out (max(A, B), M, N), float32, C order."""
    if a.shape[2] == 0:
        out[...] = 0
        return
    _tiled()(np.ascontiguousarray(a), np.ascontiguousarray(b), out)


def denormals_kept() -> bool:
    """False where something in the process flushes denormals (FTZ/DAZ in MXCSR): the
    smallest normal halved must stay a denormal through the kernels' fma."""
    tiny = np.full(1, np.finfo(np.float32).tiny, np.float32)
    half, zero, out = np.full(1, 0.5, np.float32), np.zeros(1, np.float32), np.ones(1, np.float32)
    kernels().fma_elementwise(tiny, half, zero, out)
    return bool(out[0] == tiny[0] * np.float32(0.5) and out[0] != 0)


def configure(threads: int) -> dict:
    """Set up the backend and say what it is: numba's threads (which split outputs, never
    a sum) and a check that denormals are kept; the record for the run's conditions."""
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


def set_threads(threads: int) -> None:
    """Threads split outputs, never a sum: the count changes speed only."""
    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
