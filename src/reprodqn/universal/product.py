"""The universal product on a CPU: out = A @ B with each output one chain of fma over k
ascending from +0 (reference.chain), driven over tiles.py's register tiles in the order of
Goto and van de Geijn's GEMM; A may be gathered (a convolution's windows read in place from
its input: convolution.py).

Written by hand because no library computes a product in one written order (BLAS, oneDNN
and MKL block and split their sums differently per instruction set); how k is blocked, how
B is packed and how jobs are split change speed only, never a sum's order.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from reprodqn.universal import tiles
from reprodqn.universal.threads import threads


def _block_depth(columns: int) -> int:
    """k per block: a block of a packed panel (depth x columns floats) fills 16 KB, half of
    the smallest L1 data cache these tiles meet, and stays there while every row block of
    a run goes over it."""
    return max(32, 4096 // columns)


IN_PLACE_DEPTH = 64


class Gathered(NamedTuple):
    """A matrix read in place: element (i, j) of sample n is flat[rows[n, i] + cols[j]]
    (rows (samples, M)), as gemm's A. A convolution's windows are their input this way, so
    no copy of them is made."""

    flat: np.ndarray
    rows: np.ndarray
    cols: np.ndarray


@functools.cache
def _packer(parallel: bool):
    """Rows k0 .. k0 + size of B (K, N) as panels of the tile's width, each contiguous
    (panels, size, width), zero past the last column: a copy that reads B row by row."""
    from numba import prange

    from reprodqn.universal.jit import kernel

    columns = tiles.tile().columns

    @kernel(parallel=parallel)
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

    return pack_rows


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
            _packer(threads() > 1)(np.ascontiguousarray(b[n]), 0, depth, packed[n])
    return packed


@functools.cache
def _transposed_packer():
    """pack(W^T) read from W (N, K) itself: each panel's rows of W side by side, in k
    order, rather than a transposed copy of W first (5 ms for fc1 at every update)."""
    from reprodqn.universal.jit import kernel

    columns = tiles.tile().columns

    @kernel
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
def _tile_runner(gathered: bool):
    """run_tile(r, a, a_rows, ks, n, m, k, b_at, ldb, c_m, width, size, load): the r-row
    tile on A's rows m.. of sample n from column k (a matrix's, or gathered ones), B's rows
    ldb apart from b_at."""
    from reprodqn.universal.jit import kernel

    jit = kernel(inline="always")
    if gathered:
        g_1, g_2, g_3, g_4, g_5, g_6 = tiles.calls(gathered=True)

        @jit
        def run_gathered_tile(r, a, a_rows, ks, n, m, k, b_at, ldb, c_m, width, size, load):
            a_at = a.ctypes.data
            r_at = a_rows[n if a_rows.shape[0] > 1 else 0, m:].ctypes.data
            k_at = ks[k:].ctypes.data
            if r == 6:
                g_6(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)
            elif r == 5:
                g_5(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)
            elif r == 4:
                g_4(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)
            elif r == 3:
                g_3(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)
            elif r == 2:
                g_2(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)
            else:
                g_1(a_at, r_at, k_at, b_at, ldb, c_m, width, size, load)

        return run_gathered_tile
    t_1, t_2, t_3, t_4, t_5, t_6 = tiles.calls(gathered=False)

    @jit
    def run_plain_tile(r, a, a_rows, ks, n, m, k, b_at, ldb, c_m, width, size, load):
        depth = a.shape[2]
        a_at = a[n if a.shape[0] > 1 else 0, m:, k:].ctypes.data
        if r == 6:
            t_6(a_at, depth, b_at, ldb, c_m, width, size, load)
        elif r == 5:
            t_5(a_at, depth, b_at, ldb, c_m, width, size, load)
        elif r == 4:
            t_4(a_at, depth, b_at, ldb, c_m, width, size, load)
        elif r == 3:
            t_3(a_at, depth, b_at, ldb, c_m, width, size, load)
        elif r == 2:
            t_2(a_at, depth, b_at, ldb, c_m, width, size, load)
        else:
            t_1(a_at, depth, b_at, ldb, c_m, width, size, load)

    return run_plain_tile


@functools.cache
def _driver(parallel: bool, gathered: bool):
    """The product's driver, in the order of Goto and van de Geijn's GEMM: for each block of
    k ascending, B's rows in that block are packed into panels of the tile's width (read
    row by row, they then sit in the cache), and every (sample, panel, run of row blocks)
    job runs its tiles over its panel, carrying on from where the last block of k left C.
    So each output is one chain over k ascending from +0 however k is cut, and jobs split
    outputs, never a sum. B already packed (`pack`) is read as it is; A is a matrix, or
    (`gathered`) a convolution's windows read in place."""
    from numba import prange

    from reprodqn.universal.jit import kernel

    shape = tiles.tile()
    tile_rows, tile_columns = shape.rows, shape.columns
    run_rows = tile_rows * 16  # rows per job: enough jobs for the threads at batch 1
    pack_rows = _packer(parallel)
    run_tile = _tile_runner(gathered)

    @kernel(parallel=parallel)
    def tiled(a, a_rows, ks, depth, b, prepacked, in_place, c, block_depth):
        batch, rows, width = c.shape  # width: whole panels
        panels = width // tile_columns
        runs = (rows + run_rows - 1) // run_rows
        to_pack = b.shape[0] > 0 and not in_place
        samples = b.shape[0] if b.shape[0] else prepacked.shape[0]
        ldb = width if in_place else tile_columns
        per_b = batch if samples == 1 else 1  # the samples each B serves
        buffer = np.empty((panels if to_pack else 0, block_depth, tile_columns), np.float32)
        for nb in range(samples):
            for k in range(0, depth, block_depth):
                size = min(block_depth, depth - k)
                if to_pack:
                    pack_rows(b[nb], k, size, buffer)
                load = 1 if k > 0 else 0
                for job in prange(per_b * panels * runs):
                    n = nb if samples > 1 else job // (panels * runs)
                    panel = (job // runs) % panels
                    first = (job % runs) * run_rows
                    last = min(rows, first + run_rows)
                    if in_place:
                        b_at = b[nb, k, panel * tile_columns :].ctypes.data
                    elif to_pack:
                        b_at = buffer[panel].ctypes.data
                    else:
                        b_at = prepacked[nb, panel, k:].ctypes.data
                    c_at = c[n, first:, panel * tile_columns :].ctypes.data
                    for m in range(first, last, tile_rows):
                        c_m = c_at + (m - first) * width * 4
                        r = min(tile_rows, last - m)
                        run_tile(r, a, a_rows, ks, n, m, k, b_at, ldb, c_m, width, size, load)

    return tiled


_NO_MATRIX = (np.empty((0, 0, 0), np.float32), np.empty((0, 0, 0, 0), np.float32))
_NO_OFFSETS = (np.empty((0, 0), np.int64), np.empty(0, np.int64))


def gemm(
    a: np.ndarray | Gathered,
    b: np.ndarray,
    out: np.ndarray,
    parallel: bool | None = None,
    block_depth: int | None = None,
) -> None:
    """out[n] = a[n or 0] @ b[n or 0], each output one fma chain over k ascending from +0
    (reference.chain). a (A, M, K) or Gathered (A's rows (A, M)); b (B, K, N) or its
    panels from `pack` (B, panels, K, tile width); out (max(A, B), M, N), float32.
    `block_depth` (k per block) changes speed only; a test sets it."""
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
    if b.ndim == 4:
        packed = b
    else:
        matrix = np.ascontiguousarray(b)
    # B's rows read in place where they are whole panels: no copy, but they lie ldb apart,
    # and few L1 sets hold a long block of them
    in_place = matrix.shape[0] > 0 and matrix.shape[2] == width and width % columns == 0
    blocks = block_depth or (IN_PLACE_DEPTH if in_place else _block_depth(columns))
    _driver(parallel, gathered_a)(*operand_a, depth, matrix, packed, in_place, c, blocks)
    if not whole:
        out[...] = c[:, :, :width]
