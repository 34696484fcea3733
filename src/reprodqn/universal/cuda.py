"""The universal kernels on an NVIDIA GPU, written in Triton: the same written order as the
CPU's (cpu.py), so the same bits as reference.py.

Written by hand because no GPU library computes a product in one written order (cuBLAS
and cuDNN pick split-K and tensor-core tiles by shape and GPU model). Each output is one
thread's chain of `tl.fma` (PTX `fma.rn.f32`) over k ascending from +0; blocks of outputs
share a program, never a sum. No `tl.dot` (TF32 or tensor-core order), no `tl.sum` (a tree),
no `/` (Triton's is `div.full`, 2 ulp): `div_rn` and `sqrt_rn`. Every launch compiles with
`enable_fp_fusion=False` (no separate multiply and add contracted into an fma) and
`enable_reflect_ftz=False` (libdevice keeps denormals); `denormals_kept()` checks the
result on the device.

Under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) the same kernels run in numpy,
whose fma rounds twice: `exact_interpreter()` puts the spec's fma in its place, so the
kernels' order is tested on a machine without a GPU (`pytest --universal-backend triton`:
tests/universal/conftest.py).
"""

from __future__ import annotations

import functools
import os

import torch

from reprodqn.universal.errors import NumericsError

OPTIONS = {"enable_fp_fusion": False, "enable_reflect_ftz": False}
BLOCK = 1024  # elementwise programs
ROWS, COLUMNS = 32, 32  # a product program's outputs


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _launch(kernel, grid, *args, **constants):
    """The kernel with the universal compile options (the interpreter compiles nothing)."""
    options = {} if interpreted() else OPTIONS
    kernel[grid](*args, **constants, **options)


@functools.cache
def _kernels():
    """The Triton kernels (triton_kernels.py), imported at first use: triton only then."""
    from reprodqn.universal import triton_kernels

    return triton_kernels


def _blocks(size: int) -> tuple[int]:
    return ((size + BLOCK - 1) // BLOCK,)


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out[n] = a[n or 0] @ b[n or 0], each output one fma chain over k ascending from +0.
    a (A, M, K), b (B, K, N), out (max(A, B), M, N), float32, contiguous."""
    a_t, b = a.transpose(1, 2).contiguous(), b.contiguous()  # a copy: no arithmetic
    batch, rows, width = out.shape
    depth = a.shape[2]
    a_step = rows * depth if a.shape[0] > 1 else 0
    b_step = depth * width if b.shape[0] > 1 else 0
    grid = (batch, (rows + ROWS - 1) // ROWS, (width + COLUMNS - 1) // COLUMNS)
    _launch(_kernels().product, grid, a_t, b, out, rows, width, depth, a_step, b_step,
            R=ROWS, C=COLUMNS)  # fmt: skip


def pack(b: torch.Tensor) -> torch.Tensor:
    """B as gemm reads it best: as it is on a GPU (the CPU packs panels: product.pack)."""
    return b.contiguous()


def add_column_bias(out: torch.Tensor, bias: torch.Tensor) -> None:
    _launch(_kernels().add_column_bias, _blocks(out.numel()), out, bias, out.numel(),
            out.shape[-1], B=BLOCK)  # fmt: skip


def sum_rows(terms: torch.Tensor, out: torch.Tensor) -> None:
    width = terms.shape[1]
    _launch(_kernels().sum_rows, ((width + 127) // 128,), terms, out, terms.shape[0], width, B=128)


def sum_channel_major(grad: torch.Tensor, out: torch.Tensor) -> None:
    batch, channels, width = grad.shape
    _launch(_kernels().sum_channel_major, ((channels + 31) // 32,), grad, out, batch, channels,
            width, B=32)  # fmt: skip


def im2col(x: torch.Tensor, windows: torch.Tensor, stride: int) -> None:
    """windows[n, oy, ox, c, ky, kx] = x[n, c, oy*stride + ky, ox*stride + kx]: a copy."""
    kernel = windows.shape[-1]
    views = x.unfold(2, kernel, stride).unfold(3, kernel, stride)  # (B, C, OH, OW, k, k)
    windows.copy_(views.permute(0, 2, 3, 1, 4, 5))


def windows(x: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """A convolution's windows as gemm's A (B, OH*OW, C*k*k): a copy (im2col)."""
    batch, channels, height, width = x.shape
    out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    found = x.new_empty((batch, out_h, out_w, channels, kernel, kernel))
    im2col(x, found, stride)
    return found.view(batch, out_h * out_w, -1)


def conv_weight_gradient(dy: torch.Tensor, found: torch.Tensor, grad_w: torch.Tensor) -> None:
    """grad_w (OC, C*k*k) = dy (B, OC, P) times the windows (B, P, C*k*k): a chain over
    (n, p) ascending."""
    out_c = dy.shape[1]
    dy_rows = dy.permute(1, 0, 2).reshape(1, out_c, -1)  # a copy: (n, p) ascending
    gemm(dy_rows, found.reshape(1, -1, found.shape[2]), grad_w.view(1, out_c, -1))


def conv_input_gradient(dy: torch.Tensor, weight: torch.Tensor, grad_x: torch.Tensor,
                        stride: int) -> None:  # fmt: skip
    """Each window's columns dy^T[n] W (a chain over oc), then each pixel the sum from +0
    of its columns in (ky, kx) ascending (col2im)."""
    batch, out_c, out_h, out_w = dy.shape
    _, channels, kernel, _ = weight.shape
    dcols = weight.new_empty((batch, out_h, out_w, channels, kernel, kernel))
    rows = dcols.view(batch, out_h * out_w, -1)
    gemm(dy.view(batch, out_c, -1).permute(0, 2, 1), weight.view(1, out_c, -1), rows)
    col2im(dcols, grad_x, stride)


def col2im(dcols: torch.Tensor, grad_x: torch.Tensor, stride: int) -> None:
    batch, out_h, out_w, channels, kernel, _ = dcols.shape
    height, width = grad_x.shape[2], grad_x.shape[3]
    _launch(_kernels().col2im, _blocks(grad_x.numel()), dcols, grad_x, grad_x.numel(), height,
            width, out_h, out_w, channels, stride, K=kernel, B=BLOCK)  # fmt: skip


def _elementwise(name: str, *tensors: torch.Tensor) -> None:
    size = tensors[-1].numel()
    _launch(getattr(_kernels(), name), _blocks(size), *tensors, size, B=BLOCK)


def scale_frames(frames: torch.Tensor, out: torch.Tensor) -> None:
    _elementwise("scale_frames", frames, out)


def relu(x: torch.Tensor, out: torch.Tensor) -> None:
    _elementwise("relu", x, out)


def relu_grad(grad: torch.Tensor, out: torch.Tensor, grad_x: torch.Tensor) -> None:
    _elementwise("relu_grad", grad, out, grad_x)


def fma_elementwise(a, b, c, out) -> None:
    _elementwise("fma_elementwise", a, b, c, out)


def _optimizer(name: str, tensors: tuple, scalars: tuple) -> None:
    """A step over flat float32 tensors; the hyperparameters as float32 (Triton's type for a
    Python float)."""
    size = tensors[0].numel()
    values = tuple(float(value) for value in scalars)
    _launch(getattr(_kernels(), name), _blocks(size), *tensors, *values, size, B=BLOCK)


def rmsprop(param, grad, square_avg, alpha, one_minus_alpha, eps, neg_lr) -> None:
    _optimizer("rmsprop", (param, grad, square_avg), (alpha, one_minus_alpha, eps, neg_lr))


def rmsprop_centered(param, grad, grad_avg, square_avg, alpha, one_minus_alpha, eps, neg_lr):
    tensors, scalars = (param, grad, grad_avg, square_avg), (alpha, one_minus_alpha, eps, neg_lr)
    _optimizer("rmsprop_centered", tensors, scalars)


def adam(param, grad, exp_avg, exp_avg_sq, *scalars) -> None:
    """scalars: 1 - b1, b2, 1 - b2, sqrt(1 - b2^t), eps, -lr / (1 - b1^t)."""
    _optimizer("adam", (param, grad, exp_avg, exp_avg_sq), scalars)


def sum_squares(grad: torch.Tensor, lanes: torch.Tensor) -> None:
    _launch(_kernels().sum_squares, (1,), grad, lanes, grad.numel(), W=lanes.numel())


def scale(values: torch.Tensor, factor) -> None:
    size = values.numel()
    _launch(_kernels().scale, _blocks(size), values, float(factor), size, B=BLOCK)


def denormals_kept(device: torch.device) -> bool:
    """False where the device's kernels flush denormals: the smallest normal halved, by the
    fma, must stay a denormal."""
    tiny = torch.full((1,), torch.finfo(torch.float32).tiny, device=device)
    half, zero = torch.full((1,), 0.5, device=device), torch.zeros(1, device=device)
    out = torch.ones(1, device=device)
    fma_elementwise(tiny, half, zero, out)
    return bool(out.item() == torch.finfo(torch.float32).tiny / 2)


def exact_interpreter() -> None:
    """Under TRITON_INTERPRET=1: the interpreter's fma (numpy's a * b + c, two roundings)
    replaced by the spec's correctly rounded one (reference.fma32), as `fma.rn.f32` on a GPU."""
    from triton.runtime import interpreter

    from reprodqn.universal.reference import fma32

    def create_fma(self, x, y, z):
        return interpreter.TensorHandle(fma32(x.data, y.data, z.data), z.dtype.scalar)

    interpreter.InterpreterBuilder.create_fma = create_fma


def configure(device: torch.device) -> str:
    """Check the device's kernels and say what they are (the run's conditions)."""
    try:
        import triton
    except ImportError:
        raise NumericsError(
            "compute.numerics universal: the GPU backend needs triton (it comes with torch's "
            "CUDA builds); none is installed"
        ) from None
    if not denormals_kept(device):
        raise NumericsError(
            f"compute.numerics universal: {device}'s kernels flush denormals to zero; the "
            "universal chain needs them kept"
        )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "interpreter"
    return f"cuda: triton {triton.__version__} on {name}"
