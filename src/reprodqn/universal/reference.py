"""The universal numerics spec in code: each kernel written as its order of correctly rounded
IEEE-754 binary32 operations, in plain numpy, vectorised over outputs and sequential over
every sum. Slow by design: it is what every backend is tested against, bit for bit
(docs/universal-numerics.md states the same order in words, under the same version).

numpy has no fused multiply-add, so `fma32` computes it exactly: the product of two binary32
numbers is exact in binary64, the sum is rounded to odd in binary64 (TwoSum gives its error),
and rounding that to binary32 is then correctly rounded (53 >= 24 + 2 bits).
"""

from __future__ import annotations

import numpy as np

SPEC_VERSION = "1"

f32, f64 = np.float32, np.float64


def fma32(a, b, c) -> np.ndarray:
    """fl32(a * b + c) with one rounding, elementwise over broadcast float32 arrays."""
    a64, b64, c64 = (np.asarray(v, f32).astype(f64) for v in (a, b, c))
    product = a64 * b64  # exact: 48 significant bits at most
    total = product + c64
    back = total - product
    error = (product - (total - back)) + (c64 - back)  # TwoSum: total + error is exact
    inexact = (error != 0) & np.isfinite(total)
    even = (np.atleast_1d(total).view(np.uint64) & 1).reshape(np.shape(total)) == 0
    toward = np.where(error > 0, np.inf, -np.inf)
    odd = np.where(inexact & even, np.nextafter(total, toward), total)
    with np.errstate(over="ignore"):  # an overflow is inf, as the fma's
        return odd.astype(f32)


def chain(a_rows: np.ndarray, b_cols: np.ndarray) -> np.ndarray:
    """C[m, n] = one FMA chain over k ascending from +0: acc = fma(A[m, k], B[k, n], acc)."""
    a_rows, b_cols = np.asarray(a_rows, f32), np.asarray(b_cols, f32)
    acc = np.zeros((a_rows.shape[0], b_cols.shape[1]), f32)
    for k in range(a_rows.shape[1]):
        acc = fma32(a_rows[:, k : k + 1], b_cols[k : k + 1, :], acc)
    return acc


def add_sequence(terms: np.ndarray, axis: int = 0) -> np.ndarray:
    """The sum of `terms` along `axis`, one rounded add each, ascending from +0."""
    terms = np.moveaxis(np.asarray(terms, f32), axis, 0)
    acc = np.zeros(terms.shape[1:], f32)
    for term in terms:
        acc = acc + term
    return acc


# -- layers --------------------------------------------------------------------------------


def scale_frames(frames: np.ndarray) -> np.ndarray:
    """uint8 pixels to fl32(x / 255)."""
    return np.asarray(frames, f32) / f32(255)


def relu(x: np.ndarray) -> np.ndarray:
    """x where x > 0, else +0 (so -0 becomes +0)."""
    return np.where(x > 0, x, f32(0)).astype(f32)


def relu_grad(grad: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.where(out > 0, grad, f32(0)).astype(f32)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """y[n, o] = fl(chain_i x[n, i] * W[o, i] + b[o])."""
    y = chain(x, weight.T)
    return y if bias is None else y + bias


def linear_grads(x, weight, grad_y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dx[n, i] = chain_o dy[n, o] W[o, i]; dW[o, i] = chain_n dy[n, o] x[n, i];
    db[o] = sum_n dy[n, o]."""
    return chain(grad_y, weight), chain(grad_y.T, x), add_sequence(grad_y, axis=0)


def im2col(x: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """(B, C, H, W) -> (B, C*k*k, OH*OW), rows ordered (c, ky, kx) as the weight's."""
    batch, channels, height, width = x.shape
    out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    cols = np.empty((batch, channels, kernel, kernel, out_h, out_w), f32)
    for ky in range(kernel):
        for kx in range(kernel):
            cols[:, :, ky, kx] = x[
                :, :, ky : ky + stride * out_h : stride, kx : kx + stride * out_w : stride
            ]
    return cols.reshape(batch, channels * kernel * kernel, out_h * out_w)


def conv2d(x, weight, bias, stride: int) -> np.ndarray:
    """y[n, oc, p] = fl(chain_(c, ky, kx) W[oc, c, ky, kx] x[n, c, p's window] + b[oc])."""
    out_c, _, kernel, _ = weight.shape
    cols = im2col(x, kernel, stride)
    side_h = (x.shape[2] - kernel) // stride + 1
    w2 = weight.reshape(out_c, -1)
    y = np.stack([chain(w2, c) for c in cols])
    if bias is not None:
        y = y + bias[None, :, None]
    return y.reshape(x.shape[0], out_c, side_h, -1)


def conv2d_grads(x, weight, grad_y, stride: int):
    """dW[oc, kc] = chain over (n, p) ascending of dy[n, oc, p] cols[n, kc, p];
    db[oc] = sum over (n, p) ascending of dy[n, oc, p];
    dx: dcols[n] = chain_oc W[oc, kc] dy[n, oc, p], then each input pixel the sum from +0 of
    its dcols entries in ascending (ky, kx)."""
    batch, channels, height, width = x.shape
    out_c, _, kernel, _ = weight.shape
    cols = im2col(x, kernel, stride)  # (B, KC, P)
    dy = grad_y.reshape(batch, out_c, -1)  # (B, OC, P)
    dy_rows = dy.transpose(1, 0, 2).reshape(out_c, -1)  # (OC, B*P), (n, p) ascending
    col_rows = cols.transpose(0, 2, 1).reshape(-1, cols.shape[1])  # (B*P, KC)
    grad_w = chain(dy_rows, col_rows).reshape(weight.shape)
    grad_b = add_sequence(dy_rows, axis=1)
    w2 = weight.reshape(out_c, -1)
    dcols = np.stack([chain(w2.T, d) for d in dy])  # (B, KC, P)
    out_h, out_w = grad_y.shape[2], grad_y.shape[3]
    dcols = dcols.reshape(batch, channels, kernel, kernel, out_h, out_w)
    grad_x = np.zeros(x.shape, f32)
    for ky in range(kernel):
        for kx in range(kernel):
            window = (
                slice(None),
                slice(None),
                slice(ky, ky + stride * out_h, stride),
                slice(kx, kx + stride * out_w, stride),
            )
            grad_x[window] = grad_x[window] + dcols[:, :, ky, kx]
    return grad_x, grad_w, grad_b


# -- optimizers: one step of one parameter; hyperparameters as the binary32 nearest them ---


def rmsprop(param, grad, square_avg, lr: float, alpha: float, eps: float):
    """s = fma(fl((1-a) g), g, fl(s a)); p = fl(p + fl(fl(-lr g) / fl(sqrt(s) + eps)))."""
    s = fma32(f32(1 - alpha) * grad, grad, square_avg * f32(alpha))
    return param + (f32(-lr) * grad) / (np.sqrt(s) + f32(eps)), s


def rmsprop_centered(param, grad, grad_avg, square_avg, lr: float, alpha: float, eps: float):
    mean = fma32(f32(1 - alpha), grad, grad_avg * f32(alpha))
    s = fma32(f32(1 - alpha) * grad, grad, square_avg * f32(alpha))
    step = (f32(-lr) * grad) / np.sqrt(fma32(-mean, mean, s) + f32(eps))
    return param + step, mean, s


def adam(param, grad, exp_avg, exp_avg_sq, lr, betas, eps, beta_powers):
    """beta_powers: (b1^t, b2^t) in binary64, after this step's product."""
    (beta1, beta2), (power1, power2) = betas, beta_powers
    m = fma32(f32(1 - beta1), grad - exp_avg, exp_avg)
    v = fma32(f32(1 - beta2) * grad, grad, exp_avg_sq * f32(beta2))
    step_size, root_c2 = lr / (1 - power1), np.sqrt(np.float64(1 - power2))
    denom = np.sqrt(v) / f32(root_c2) + f32(eps)
    return param + (f32(-step_size) * m) / denom, m, v
