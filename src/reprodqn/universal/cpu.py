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
from typing import NamedTuple

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
def _sums(parallel: bool) -> dict:
    """The biases and the bias gradients' sums."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)

    @jit(parallel=parallel)
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

    @jit(parallel=parallel)
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
def _windows(parallel: bool):
    """A convolution's windows as rows (a copy), and the input gradient from theirs."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)

    # Both index flat views: numba's six-dimensional indexing costs more than the copy.
    @jit(parallel=parallel)
    def col2im(dcols, grad_x, stride):
        """grad_x[n, c, y, x] = for (ky, kx) ascending, from +0: + dcols[n, oy, ox, c, ky,
        kx] over the window positions that read the pixel: each pixel's chain summed in a
        register (flat indices: numba's six-dimensional indexing costs more than the sum)."""
        batch, out_h, out_w, channels, kernel, _ = dcols.shape
        height, width = grad_x.shape[2], grad_x.shape[3]
        source, target = dcols.reshape(-1), grad_x.reshape(-1)
        window = channels * kernel * kernel
        for job in prange(batch * height):
            n, y = job // height, job % height
            oys, kys, rows = np.empty(kernel, np.int64), np.empty(kernel, np.int64), 0
            for ky in range(kernel):  # the window rows that read pixel row y, ky ascending
                t = y - ky
                if t >= 0 and t % stride == 0 and t // stride < out_h:
                    oys[rows], kys[rows] = t // stride, ky
                    rows += 1
            oxs, kxs = np.empty(kernel, np.int64), np.empty(kernel, np.int64)
            for x in range(width):
                columns = 0
                for kx in range(kernel):
                    t = x - kx
                    if t >= 0 and t % stride == 0 and t // stride < out_w:
                        oxs[columns], kxs[columns] = t // stride, kx
                        columns += 1
                for c in range(channels):
                    acc = np.float32(0.0)
                    for i in range(rows):
                        for j in range(columns):
                            at = ((n * out_h + oys[i]) * out_w + oxs[j]) * window
                            acc = acc + source[at + (c * kernel + kys[i]) * kernel + kxs[j]]
                    target[((n * channels + c) * height + y) * width + x] = acc

    @jit(parallel=parallel)
    def im2col(x, windows, stride):
        """windows[n, oy, ox, c, ky, kx] = x[n, c, oy*stride + ky, ox*stride + kx]: a copy."""
        batch, out_h, out_w, channels, kernel, _ = windows.shape
        height, width = x.shape[2], x.shape[3]
        source, target = x.reshape(-1), windows.reshape(-1)
        for job in prange(batch * out_h):
            n = job // out_h
            oy = job - n * out_h
            at = job * out_w * channels * kernel * kernel
            for ox in range(out_w):
                for c in range(channels):
                    for ky in range(kernel):
                        row = ((n * channels + c) * height + oy * stride + ky) * width
                        start = row + ox * stride
                        for kx in range(kernel):
                            target[at + kx] = source[start + kx]
                        at += kernel

    return col2im, im2col


@functools.cache
def _elementwise(parallel: bool) -> dict:
    """The input scaling, ReLU and its gradient, and a plain fma."""
    from numba import njit, prange

    jit = functools.partial(njit, **JIT)
    fma = fma32()

    @jit(parallel=parallel)
    def scale_frames(frames, out):
        """out = fl32(pixel / 255), the pixel converted exactly."""
        flat_in, flat_out = frames.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            flat_out[i] = np.float32(flat_in[i]) / np.float32(255.0)

    @jit(parallel=parallel)
    def relu(x, out):
        """out = x where x > 0, else +0."""
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
        for i in prange(flat_in.size):
            v = flat_in[i]
            flat_out[i] = v if v > np.float32(0.0) else np.float32(0.0)

    @jit(parallel=parallel)
    def relu_grad(grad, out, grad_x):
        """grad_x = grad where out > 0, else +0."""
        g, o, gx = grad.reshape(-1), out.reshape(-1), grad_x.reshape(-1)
        for i in prange(g.size):
            gx[i] = g[i] if o[i] > np.float32(0.0) else np.float32(0.0)

    @jit
    def holds_nan(values):
        """Whether any value is a NaN: one pass, nothing allocated (a NaN is not equal to
        itself)."""
        flat = values.reshape(-1)
        found = False
        for i in range(flat.size):
            found |= flat[i] != flat[i]
        return found

    @jit
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


_threads: dict[str, int] = {}  # the count `set_threads` was given; torch's until then


def threads() -> int:
    if "count" not in _threads:
        import torch

        set_threads(torch.get_num_threads())  # an evaluation worker's, say
    return _threads["count"]


def kernels() -> SimpleNamespace:
    """The compiled kernels for the thread count set (numba imported and compiled on first
    use, cached on disk). At one thread they are compiled without numba's parallel layer,
    so no pool of threads waits, spinning, on a core another process needs; threads change
    speed only."""
    return _kernels(threads() > 1)


@functools.cache
def _kernels(parallel: bool) -> SimpleNamespace:
    col2im, im2col = _windows(parallel)
    found = SimpleNamespace(
        fma32=fma32(),
        col2im=col2im,
        im2col=im2col,
        gemm=functools.partial(gemm, parallel=parallel),
        **_sums(parallel),
        **_elementwise(parallel),
        **_optimizers(),
    )
    if parallel:
        _apply_threads()  # numba may start its pool while compiling: the count set, again
    return found


def _block_depth(columns: int) -> int:
    """k per block: a block of a packed panel (depth x columns floats) fills 16 KB, half of
    the smallest L1 data cache these tiles meet, and stays there while every row block of
    a run goes over it."""
    return max(32, 4096 // columns)


class Gathered(NamedTuple):
    """A matrix read in place: element (i, j) is flat[rows[i] + cols[j]]. As gemm's A, rows
    is (samples, M); as its B, (K,). A convolution's windows are their input this way, so
    no copy of them is made."""

    flat: np.ndarray
    rows: np.ndarray
    cols: np.ndarray


@functools.cache
def _window_offsets(shape: tuple[int, ...], kernel: int, stride: int):
    batch, channels, height, width = shape
    out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    image = np.arange(batch, dtype=np.int64)[:, None, None] * channels * height * width
    corner = (np.arange(out_h) * stride * width)[:, None] + np.arange(out_w) * stride
    rows = (image + corner[None]).reshape(batch, out_h * out_w)
    cols = (np.arange(channels)[:, None, None] * height * width
            + (np.arange(kernel) * width)[:, None] + np.arange(kernel)).reshape(-1)  # fmt: skip
    return rows, cols.astype(np.int64)


def windows(x: np.ndarray, kernel: int, stride: int) -> Gathered:
    """A convolution's windows of x (B, C, H, W) in place, as gemm's A: row (n, oy, ox),
    column (c, ky, kx) in the weight's order, what im2col would copy."""
    rows, cols = _window_offsets(x.shape, kernel, stride)
    return Gathered(np.ascontiguousarray(x).reshape(-1), rows, cols)


def window_rows(found: Gathered) -> Gathered:
    """The same windows as gemm's B: (n, oy, ox) down, (c, ky, kx) across."""
    return Gathered(found.flat, found.rows.reshape(-1), found.cols)


@functools.cache
def _packer(parallel: bool):
    """Rows k0 .. k0 + size of B as panels of the tile's width, each contiguous (panels,
    size, width), zero past the last column: a copy that reads B row by row. B is a
    matrix (K, N), or gathered (flat, rows, cols)."""
    from numba import njit, prange

    columns = tiles.tile().columns

    @njit(parallel=parallel, fastmath=False, error_model="numpy", nogil=True)
    def pack_rows(b, k0, size, packed):
        width = b.shape[1]
        whole = width // columns
        for kk in prange(size):
            row = b[k0 + kk]
            for panel in range(whole):
                target, start = packed[panel, kk], panel * columns
                for lane in range(columns):
                    target[lane] = row[start + lane]
            if whole < packed.shape[0]:
                target = packed[whole, kk]
                for lane in range(columns):
                    j = whole * columns + lane
                    target[lane] = row[j] if j < width else np.float32(0.0)

    @njit(parallel=parallel, fastmath=False, error_model="numpy", nogil=True)
    def pack_gathered(flat, rows, cols, k0, size, packed):
        width = cols.shape[0]
        for kk in prange(size):
            start = rows[k0 + kk]
            for panel in range(packed.shape[0]):
                target, first = packed[panel, kk], panel * columns
                for lane in range(min(columns, width - first)):
                    target[lane] = flat[start + cols[first + lane]]
                for lane in range(min(columns, width - first), columns):
                    target[lane] = np.float32(0.0)

    return pack_rows, pack_gathered


def pack(b: np.ndarray) -> np.ndarray:
    """B's panels (S, panels, K, tile width) for gemm: a layer keeps its weights' until they
    change, so acting does not copy them at every step."""
    columns = tiles.tile().columns
    samples, depth, width = b.shape
    packed = np.empty((samples, (width + columns - 1) // columns, depth, columns), np.float32)
    for n in range(samples):
        if b[n].strides[0] == 4 and b[n].strides[1] > 4:  # a transposed view: read as it lies
            _transposed_packer()(b[n].T, packed[n])
        else:
            _packer(threads() > 1)[0](np.ascontiguousarray(b[n]), 0, depth, packed[n])
    return packed


@functools.cache
def _transposed_packer():
    """pack(W^T) read from W (N, K) itself: each panel's rows of W side by side, in k
    order, rather than a transposed copy of W first (5 ms for fc1 at every update)."""
    from numba import njit

    columns = tiles.tile().columns

    @njit(fastmath=False, error_model="numpy", nogil=True)
    def pack_transposed(w, packed):
        width, depth = w.shape
        for panel in range(packed.shape[0]):
            target, first = packed[panel], panel * columns
            lanes = min(columns, width - first)
            for k in range(depth):  # sixteen (or 32) rows of W read side by side
                for lane in range(lanes):
                    target[k, lane] = w[first + lane, k]
                for lane in range(lanes, columns):
                    target[k, lane] = np.float32(0.0)

    return pack_transposed


@functools.cache
def _driver(parallel: bool, gathered: bool):
    """The product's driver, in the order of Goto and van de Geijn's GEMM: for each block of
    k ascending, B's rows in that block are packed into panels of the tile's width (read
    row by row, they then sit in the cache), and every (sample, panel, run of row blocks)
    job runs its tiles over its panel, carrying on from where the last block of k left C.
    So each output is one chain over k ascending from +0 however k is cut, and jobs split
    outputs, never a sum. B already packed (`pack`) is read as it is; A is a matrix, or
    (`gathered`) a convolution's windows read in place. Not cached on disk: it calls the
    tiles by their address in this process."""
    from numba import njit, prange

    kernel = tiles.tile()
    tile_rows, tile_columns = kernel.rows, kernel.columns
    run_rows = tile_rows * 16  # rows per job: enough jobs for the threads at batch 1
    pack_rows, pack_gathered = _packer(parallel)
    jit = njit(fastmath=False, error_model="numpy", nogil=True, inline="always")
    if gathered:
        g_1, g_2, g_3, g_4, g_5, g_6 = kernel.gathered

        @jit
        def run_tile(r, a, a_rows, ks, n, m, k, b_at, c_m, width, size, load):
            a_at = a.ctypes.data
            r_at = a_rows[n if a_rows.shape[0] > 1 else 0, m:].ctypes.data
            k_at = ks[k:].ctypes.data
            if r == 6:
                g_6(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)
            elif r == 5:
                g_5(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)
            elif r == 4:
                g_4(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)
            elif r == 3:
                g_3(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)
            elif r == 2:
                g_2(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)
            else:
                g_1(a_at, r_at, k_at, b_at, tile_columns, c_m, width, size, load)

    else:
        t_1, t_2, t_3, t_4, t_5, t_6 = kernel.functions

        @jit
        def run_tile(r, a, a_rows, ks, n, m, k, b_at, c_m, width, size, load):
            depth = a.shape[2]
            a_at = a[n if a.shape[0] > 1 else 0, m:, k:].ctypes.data
            if r == 6:
                t_6(a_at, depth, b_at, tile_columns, c_m, width, size, load)
            elif r == 5:
                t_5(a_at, depth, b_at, tile_columns, c_m, width, size, load)
            elif r == 4:
                t_4(a_at, depth, b_at, tile_columns, c_m, width, size, load)
            elif r == 3:
                t_3(a_at, depth, b_at, tile_columns, c_m, width, size, load)
            elif r == 2:
                t_2(a_at, depth, b_at, tile_columns, c_m, width, size, load)
            else:
                t_1(a_at, depth, b_at, tile_columns, c_m, width, size, load)

    @njit(parallel=parallel, fastmath=False, error_model="numpy", nogil=True)
    def tiled(a, a_rows, ks, depth, b, prepacked, b_flat, b_rows, b_cols, c, block_depth):
        batch, rows, width = c.shape  # width: whole panels
        panels = width // tile_columns
        runs = (rows + run_rows - 1) // run_rows
        mode = 0 if b.shape[0] else 1 if prepacked.shape[0] else 2  # matrix, packed, gathered
        samples = b.shape[0] if mode == 0 else prepacked.shape[0] if mode == 1 else 1
        per_b = batch if samples == 1 else 1  # the samples each B serves
        buffer = np.empty((0 if mode == 1 else panels, block_depth, tile_columns), np.float32)
        for nb in range(samples):
            for k in range(0, depth, block_depth):
                size = min(block_depth, depth - k)
                if mode == 0:
                    pack_rows(b[nb], k, size, buffer)
                elif mode == 2:
                    pack_gathered(b_flat, b_rows, b_cols, k, size, buffer)
                load = 1 if k > 0 else 0
                for job in prange(per_b * panels * runs):
                    n = nb if samples > 1 else job // (panels * runs)
                    panel = (job // runs) % panels
                    first = (job % runs) * run_rows
                    last = min(rows, first + run_rows)
                    if mode == 1:
                        b_at = prepacked[nb, panel, k:].ctypes.data
                    else:
                        b_at = buffer[panel].ctypes.data
                    c_at = c[n, first:, panel * tile_columns :].ctypes.data
                    for m in range(first, last, tile_rows):
                        c_m = c_at + (m - first) * width * 4
                        r = min(tile_rows, last - m)
                        run_tile(r, a, a_rows, ks, n, m, k, b_at, c_m, width, size, load)

    return tiled


_NO_MATRIX = (np.empty((0, 0, 0), np.float32), np.empty((0, 0, 0, 0), np.float32))
_NO_GATHERED = (np.empty(0, np.float32), np.empty(0, np.int64), np.empty(0, np.int64))
_NO_OFFSETS = (np.empty((0, 0), np.int64), np.empty(0, np.int64))


def gemm(
    a: np.ndarray | Gathered,
    b: np.ndarray | Gathered,
    out: np.ndarray,
    parallel: bool | None = None,
    block_depth: int | None = None,
) -> None:
    """out[n] = a[n or 0] @ b[n or 0], each output one fma chain over k ascending from +0
    (reference.chain). a (A, M, K) or Gathered (A's rows (A, M)); b (B, K, N), its panels
    from `pack` (B, panels, K, tile width) or Gathered (one B); out (max(A, B), M, N),
    float32. `block_depth` (k per block) changes speed only; a test sets it."""
    gathered_a = isinstance(a, Gathered)
    if isinstance(a, Gathered):
        operand_a: tuple[np.ndarray, ...] = tuple(a)
        depth = a.cols.shape[0]
    else:
        operand_a, depth = (np.ascontiguousarray(a), *_NO_OFFSETS), a.shape[2]
    if depth == 0:
        out[...] = 0
        return
    if parallel is None:
        parallel = threads() > 1
    columns = tiles.tile().columns
    width = out.shape[2]
    whole = width % columns == 0 and out.flags.c_contiguous
    c = out if whole else np.empty((*out.shape[:2], -(-width // columns) * columns), np.float32)
    matrix, packed = _NO_MATRIX
    gathered_b: tuple[np.ndarray, ...] = _NO_GATHERED
    if isinstance(b, Gathered):
        gathered_b = tuple(b)
    elif b.ndim == 4:
        packed = b
    else:
        matrix = b if b.strides[2] == 4 else np.ascontiguousarray(b)
    blocks = block_depth or (depth if packed.shape[0] else _block_depth(columns))
    _driver(parallel, gathered_a)(*operand_a, depth, matrix, packed, *gathered_b, c, blocks)
    if not whole:
        out[...] = c[:, :, :width]


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


def set_threads(count: int) -> None:
    """Threads split outputs, never a sum: the count changes speed only. One thread runs
    the kernels compiled without numba's parallel layer."""
    import numba

    _threads["count"] = max(1, min(count, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    if _threads["count"] > 1:
        _apply_threads()


def _apply_threads() -> None:
    import numba

    numba.set_num_threads(_threads["count"])
