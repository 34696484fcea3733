"""The authors' resize, OpenCV's INTER_LINEAR on 8-bit frames, computed by reprodqn in
integers, so its bytes are the same on every machine.

OpenCV computes the interpolation's coefficients in floating point, in C code a compiler
may contract into fused multiply-adds (GCC does by default on aarch64), and a build may
hand the resize to a HAL (Carotene on ARM). The coefficients are a fixed table per image
size, though, and the interpolation itself is integer arithmetic. So: the table computed as
OpenCV computes it, in Python's binary64 and numpy's binary32 (neither ever contracts),
then OpenCV's fixed-point passes written out in numpy integers. Equal to `cv2.resize(...,
INTER_LINEAR)` on x86-64 byte for byte (tests/training/test_linear_resize.py: 10,000
frames of five games).

OpenCV's passes (modules/imgproc/src/resize.cpp, 8-bit INTER_LINEAR): per axis,
f = fl32((d + 0.5) * scale - 0.5) with scale = 1 / (target / source) in binary64,
s = floor(f), f = fl32(f - s); across, a source column past either edge is clamped with
f = 0; the weights are round-half-even(fl32(1 - f) * 2048) and round-half-even(f * 2048).
Across: D = S[s] * a0 + S[s + 1] * a1 (int32). Down (rows clamped to the image, weights
unchanged): ((b0 * (D0 >> 4)) >> 16) + ((b1 * (D1 >> 4)) >> 16), plus 2, >> 2, saturated to
0..255: the formula of OpenCV's vector loop (VResizeLinearVec_32s8u), which the pinned
OpenCV applies to every pixel of a row, its last ones included (measured: its scalar
formula, (b0 * D0 + b1 * D1 + 2^21) >> 22, would differ by one in a few).
"""

from __future__ import annotations

import functools
import math

import numpy as np

COEF_SCALE = 2048  # INTER_RESIZE_COEF_SCALE: 11 fractional bits


def _fraction(d: int, scale: float) -> tuple[int, np.float32]:
    f = np.float32((d + 0.5) * scale - 0.5)  # binary64, then rounded once to binary32
    s = math.floor(f)
    return s, np.float32(f - np.float32(s))


def _weights(f: np.float32) -> tuple[int, int]:
    one = np.float32(COEF_SCALE)
    return int(np.rint((np.float32(1) - f) * one)), int(np.rint(f * one))


@functools.cache
def columns(source: int, target: int) -> tuple[np.ndarray, np.ndarray]:
    """Each target column's first source column and its two weights (a0, a1)."""
    scale = 1.0 / (target / source)
    first, weights = np.empty(target, np.int64), np.empty((target, 2), np.int64)
    for d in range(target):
        s, f = _fraction(d, scale)
        if s < 0:
            s, f = 0, np.float32(0)
        if s >= source - 1:
            s, f = source - 1, np.float32(0)
        first[d], weights[d] = s, _weights(f)
    return first, weights


@functools.cache
def rows(source: int, target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each target row's two source rows (clamped to the image) and weights (b0, b1)."""
    scale = 1.0 / (target / source)
    top, bottom = np.empty(target, np.int64), np.empty(target, np.int64)
    weights = np.empty((target, 2), np.int64)
    for d in range(target):
        s, f = _fraction(d, scale)
        top[d], bottom[d] = min(max(s, 0), source - 1), min(max(s + 1, 0), source - 1)
        weights[d] = _weights(f)
    return top, bottom, weights


@functools.cache
def _tables(height: int, width: int, size: int) -> tuple[np.ndarray, ...]:
    """columns() and rows() as int32 (every intermediate fits: 255 * 2048 * 2 across a row,
    2048 * 32640 down a column), C's second column clamped as OpenCV clamps it."""
    first, a = columns(width, size)
    top, bottom, b = rows(height, size)
    second = np.minimum(first + 1, width - 1)
    tables = (first, second, a[:, 0], a[:, 1], top, bottom, b[:, :1], b[:, 1:])
    return tuple(np.ascontiguousarray(t, dtype=np.int32) for t in tables)


def resize(image: np.ndarray, size: int) -> np.ndarray:
    """(H, W) uint8 -> (size, size) uint8: cv2.resize(image, (size, size), INTER_LINEAR),
    in int32 (a quarter of int64's time: 0.18 ms a frame here, in a 10 ms agent step)."""
    first, second, a0, a1, top, bottom, b0, b1 = _tables(*image.shape, size)
    pixels = image.astype(np.int32)
    across = pixels[:, first] * a0 + pixels[:, second] * a1
    upper, lower = across[top] >> 4, across[bottom] >> 4
    out = (((b0 * upper) >> 16) + ((b1 * lower) >> 16) + 2) >> 2
    return np.clip(out, 0, 255).astype(np.uint8)
