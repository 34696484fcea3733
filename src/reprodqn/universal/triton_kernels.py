"""The universal kernels for an NVIDIA GPU in Triton (cuda.py launches them and says why
they are written so): each product output one thread's chain of `tl.fma` over k ascending
from +0, every sum a loop in order, `/` and `sqrt` as `div_rn` and `sqrt_rn`. Imported only
where triton is installed and a GPU tensor (or Triton's interpreter) needs them.
"""

import triton
import triton.language as tl


@triton.jit
def product(a_t, b, out, rows, width, depth, a_step, b_step, R: tl.constexpr, C: tl.constexpr):
    """out[n] = a[n or 0] @ b[n or 0]: acc = fma(a[m, k], b[k, j], acc), k ascending. `a_t`
    is a transposed (K, M), so each k's column of a block is one coalesced load, as b's row."""
    n, block, panel = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    m = block * R + tl.arange(0, R)
    j = panel * C + tl.arange(0, C)
    a_columns = a_t + n * a_step + m
    b_columns = b + n * b_step + j
    acc = tl.zeros((R, C), tl.float32)
    for k in range(depth):
        left = tl.load(a_columns + k * rows, mask=m < rows, other=0.0)
        right = tl.load(b_columns + k * width, mask=j < width, other=0.0)
        acc = tl.fma(left[:, None], right[None, :], acc)
    at = out + n * rows * width + m[:, None] * width + j[None, :]
    tl.store(at, acc, mask=(m[:, None] < rows) & (j[None, :] < width))


@triton.jit
def add_column_bias(out, bias, size, width, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    value = tl.load(out + i, mask=inside) + tl.load(bias + i % width, mask=inside)
    tl.store(out + i, value, mask=inside)


@triton.jit
def sum_rows(terms, out, rows, width, B: tl.constexpr):
    """out[j] = terms[0, j] + terms[1, j] + ..., ascending from +0."""
    j = tl.program_id(0) * B + tl.arange(0, B)
    acc = tl.zeros((B,), tl.float32)
    for r in range(rows):
        acc = acc + tl.load(terms + r * width + j, mask=j < width, other=0.0)
    tl.store(out + j, acc, mask=j < width)


@triton.jit
def sum_channel_major(grad, out, batch, channels, width, B: tl.constexpr):
    """out[c] = sum over (n, p) ascending of grad[n, c, p], from +0."""
    c = tl.program_id(0) * B + tl.arange(0, B)
    acc = tl.zeros((B,), tl.float32)
    for n in range(batch):
        for p in range(width):
            at = grad + (n * channels + c) * width + p
            acc = acc + tl.load(at, mask=c < channels, other=0.0)
    tl.store(out + c, acc, mask=c < channels)


@triton.jit
def col2im(dcols, grad_x, size, height, width, out_h, out_w, channels, stride,
           K: tl.constexpr, B: tl.constexpr):  # fmt: skip
    """grad_x[n, c, y, x] = from +0, for (ky, kx) ascending: + dcols[n, oy, ox, c, ky, kx]
    of the window position (oy, ox) that reads pixel (y, x) through (ky, kx)."""
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    x = i % width
    y = (i // width) % height
    c = (i // (width * height)) % channels
    n = i // (width * height * channels)
    acc = tl.zeros((B,), tl.float32)
    for ky in range(K):
        for kx in range(K):
            oy, ox = (y - ky) // stride, (x - kx) // stride
            hit = (y >= ky) & (x >= kx) & ((y - ky) % stride == 0) & ((x - kx) % stride == 0)
            hit = hit & (oy < out_h) & (ox < out_w) & inside
            at = ((((n * out_h + oy) * out_w + ox) * channels + c) * K + ky) * K + kx
            acc = tl.where(hit, acc + tl.load(dcols + at, mask=hit, other=0.0), acc)
    tl.store(grad_x + i, acc, mask=inside)


@triton.jit
def scale_frames(frames, out, size, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    pixel = tl.load(frames + i, mask=i < size, other=0).to(tl.float32)
    tl.store(out + i, tl.math.div_rn(pixel, tl.full((B,), 255.0, tl.float32)), mask=i < size)


@triton.jit
def relu(x, out, size, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    v = tl.load(x + i, mask=i < size, other=0.0)
    tl.store(out + i, tl.where(v > 0.0, v, 0.0), mask=i < size)


@triton.jit
def relu_grad(grad, out, grad_x, size, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    g = tl.load(grad + i, mask=i < size, other=0.0)
    o = tl.load(out + i, mask=i < size, other=0.0)
    tl.store(grad_x + i, tl.where(o > 0.0, g, 0.0), mask=i < size)


@triton.jit
def fma_elementwise(a, b, c, out, size, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    value = tl.fma(tl.load(a + i, mask=inside), tl.load(b + i, mask=inside),
                   tl.load(c + i, mask=inside))  # fmt: skip
    tl.store(out + i, value, mask=inside)


@triton.jit
def rmsprop(param, grad, square_avg, alpha, one_minus_alpha, eps, neg_lr, size,
            B: tl.constexpr):  # fmt: skip
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    g = tl.load(grad + i, mask=inside)
    s = tl.fma(one_minus_alpha * g, g, tl.load(square_avg + i, mask=inside) * alpha)
    step = tl.math.div_rn(neg_lr * g, tl.sqrt_rn(s) + eps)
    tl.store(square_avg + i, s, mask=inside)
    tl.store(param + i, tl.load(param + i, mask=inside) + step, mask=inside)


@triton.jit
def rmsprop_centered(param, grad, grad_avg, square_avg, alpha, one_minus_alpha, eps, neg_lr,
                     size, B: tl.constexpr):  # fmt: skip
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    g = tl.load(grad + i, mask=inside)
    mean = tl.fma(one_minus_alpha, g, tl.load(grad_avg + i, mask=inside) * alpha)
    s = tl.fma(one_minus_alpha * g, g, tl.load(square_avg + i, mask=inside) * alpha)
    step = tl.math.div_rn(neg_lr * g, tl.sqrt_rn(tl.fma(-mean, mean, s) + eps))
    tl.store(grad_avg + i, mean, mask=inside)
    tl.store(square_avg + i, s, mask=inside)
    tl.store(param + i, tl.load(param + i, mask=inside) + step, mask=inside)


@triton.jit
def adam(param, grad, exp_avg, exp_avg_sq, one_minus_b1, beta2, one_minus_b2, root_c2, eps,
         neg_step, size, B: tl.constexpr):  # fmt: skip
    i = tl.program_id(0) * B + tl.arange(0, B)
    inside = i < size
    g = tl.load(grad + i, mask=inside)
    m = tl.load(exp_avg + i, mask=inside)
    m = tl.fma(one_minus_b1, g - m, m)
    v = tl.fma(one_minus_b2 * g, g, tl.load(exp_avg_sq + i, mask=inside) * beta2)
    step = tl.math.div_rn(neg_step * m, tl.math.div_rn(tl.sqrt_rn(v), root_c2) + eps)
    tl.store(exp_avg + i, m, mask=inside)
    tl.store(exp_avg_sq + i, v, mask=inside)
    tl.store(param + i, tl.load(param + i, mask=inside) + step, mask=inside)


@triton.jit
def sum_squares(grad, lanes, size, W: tl.constexpr):
    """lanes[i mod W] = fma(g_i, g_i, lanes[i mod W]), i ascending: one program."""
    j = tl.arange(0, W)
    acc = tl.load(lanes + j)
    for start in range(0, size, W):
        inside = start + j < size
        g = tl.load(grad + start + j, mask=inside, other=0.0)
        acc = tl.where(inside, tl.fma(g, g, acc), acc)
    tl.store(lanes + j, acc)


@triton.jit
def scale(values, factor, size, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(values + i, tl.load(values + i, mask=i < size) * factor, mask=i < size)
