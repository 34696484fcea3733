"""A convolution's three products on a CPU, in the spec's order (reference.conv2d and
conv2d_grads), laid out for the tiles: the windows read in place from the input (no im2col
copy), the weight gradient as windows^T dy^T (the windows gathered as A, so only dy is
packed), the input gradient's columns channel-last and summed onto the pixels a (ky, kx) at
a time, in vector lanes over channels.

A layout here changes speed only: every product is gemm's (each output one fma chain over k
ascending from +0; fma(a, b, c) = fma(b, a, c), so a transposed product is the same chain),
and every pixel's gradient is the sum from +0 of its terms in (ky, kx) ascending.
"""

from __future__ import annotations

import functools

import numpy as np

from reprodqn.universal import tiles
from reprodqn.universal.product import Gathered, gemm
from reprodqn.universal.threads import threads


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


@functools.cache
def _movers(parallel: bool):
    """Copies that lay a gradient out for the tiles, and the channel-last sum onto pixels."""
    from numba import prange

    from reprodqn.universal.jit import kernel

    columns = tiles.tile().columns
    jit = kernel(parallel=parallel)

    @jit
    def pack_gradient(dy, packed):
        """dy (B, OC, P) as gemm's packed B (1, panels, B*P, width): row (n, p), column oc."""
        batch, channels, positions = dy.shape
        zero = np.float32(0.0)
        for panel in prange(packed.shape[1]):
            for n in range(batch):
                for lane in range(columns):
                    o = panel * columns + lane
                    at = n * positions
                    for p in range(positions):
                        packed[0, panel, at + p, lane] = dy[n, o, p] if o < channels else zero

    @jit
    def sum_onto_pixels(dcols, grad_x, stride):
        """grad_x[n, c, y, x] = from +0, for (ky, kx) ascending, + dcols[n, oy, ox, ky, kx,
        c] of each window (oy, ox) that read the pixel: a plane of all channels at a time,
        channel-last (a window's channels are contiguous: vector lanes), then transposed."""
        batch, out_h, out_w, kernel, _, channels = dcols.shape
        height, width = grad_x.shape[2], grad_x.shape[3]
        for n in prange(batch):
            plane = np.zeros((height, width, channels), np.float32)
            for ky in range(kernel):
                for kx in range(kernel):
                    for oy in range(out_h):
                        for ox in range(out_w):
                            pixel = plane[oy * stride + ky, ox * stride + kx]
                            terms = dcols[n, oy, ox, ky, kx]
                            for c in range(channels):
                                pixel[c] = pixel[c] + terms[c]
            for c in range(channels):
                for y in range(height):
                    for x in range(width):
                        grad_x[n, c, y, x] = plane[y, x, c]

    return pack_gradient, sum_onto_pixels


def weight_gradient(dy: np.ndarray, found: Gathered, grad_w: np.ndarray) -> None:
    """grad_w (OC, C*k*k) = dy (B, OC, P) times the windows, a chain over (n, p) ascending:
    computed as its transpose, the windows gathered as A (rows (c, ky, kx), k (n, p)) and
    dy packed as B, so the large operand is read in place rather than packed."""
    parallel = threads() > 1
    batch, out_c, positions = dy.shape
    columns = tiles.tile().columns
    packed = np.empty((1, -(-out_c // columns), batch * positions, columns), np.float32)
    _movers(parallel)[0](np.ascontiguousarray(dy), packed)
    transposed = np.empty((1, found.cols.shape[0], out_c), np.float32)
    gemm(Gathered(found.flat, found.cols[None], found.rows.reshape(-1)), packed, transposed)
    grad_w[...] = transposed[0].T


@functools.cache
def _gradient_rows(batch: int, channels: int, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """dy (B, OC, P) read in place as A (B, P, OC): rows (n, p), k oc."""
    rows = np.arange(batch, dtype=np.int64)[:, None] * channels * positions + np.arange(positions)
    return rows, np.arange(channels, dtype=np.int64) * positions


@functools.cache
def _input_gradient(parallel: bool):
    """input_gradient's loop: a few samples' columns at a time, each chunk summed onto its
    pixels while it is still in L2 (all at once, the columns were 5 MB written and read
    back)."""
    from reprodqn.universal.jit import kernel
    from reprodqn.universal.product import IN_PLACE_DEPTH, _driver

    tiled, sum_onto_pixels = _driver(parallel, True), _movers(parallel)[1]
    no_packed = np.empty((0, 0, 0, 0), np.float32)

    @kernel
    def by_chunks(flat, rows, ks, channels_last, grad_x, stride, shape, chunk):
        out_h, out_w, kernel, _, channels = shape
        width = channels_last.shape[2]
        buffer = np.empty((chunk, out_h * out_w, width), np.float32)
        for n in range(0, rows.shape[0], chunk):
            size = min(chunk, rows.shape[0] - n)
            columns = buffer[:size]
            tiled(flat, rows[n : n + size], ks, ks.shape[0], channels_last, no_packed, True,
                  columns, IN_PLACE_DEPTH)  # fmt: skip
            shaped = columns.reshape(size, out_h, out_w, kernel, kernel, channels)
            sum_onto_pixels(shaped, grad_x[n : n + size], stride)

    return by_chunks


def input_gradient(dy: np.ndarray, weight: np.ndarray, grad_x: np.ndarray, stride: int) -> None:
    """grad_x (B, C, H, W) from dy (B, OC, OH, OW) and W (OC, C, k, k): each window's
    columns a chain over oc (dy read in place; W's columns ordered (ky, kx, c)), then each
    pixel the sum from +0 of its columns in (ky, kx) ascending."""
    batch, out_c, out_h, out_w = dy.shape
    _, channels, kernel, _ = weight.shape
    rows, ks = _gradient_rows(batch, out_c, out_h * out_w)
    channels_last = np.ascontiguousarray(weight.transpose(0, 2, 3, 1)).reshape(1, out_c, -1)
    if channels_last.shape[2] % tiles.tile().columns:  # not whole panels: gemm pads them
        dcols = np.empty((batch, out_h * out_w, channels_last.shape[2]), np.float32)
        gemm(Gathered(np.ascontiguousarray(dy).reshape(-1), rows, ks), channels_last, dcols)
        shaped = dcols.reshape(batch, out_h, out_w, kernel, kernel, channels)
        _movers(threads() > 1)[1](shaped, grad_x, stride)
        return
    shape = (out_h, out_w, kernel, kernel, channels)
    _input_gradient(threads() > 1)(np.ascontiguousarray(dy).reshape(-1), rows, ks,
                                   channels_last, grad_x, stride, shape, threads())  # fmt: skip
