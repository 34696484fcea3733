"""The universal layers: Conv2d, Linear, ReLU and the frame scaling as torch modules whose
forward and backward run the universal kernels (cpu.py), bit for bit the spec's
(reference.py). torch only stores and moves the data: each layer is an autograd Function
whose arithmetic is the kernels', and every output is checked for NaN, which stops the run
naming the op (a NaN's payload differs between machines).

The weights and state-dict names are nn.Conv2d's and nn.Linear's, so a module built of
these saves, loads and checkpoints as its standard twin does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from reprodqn.universal import cpu
from reprodqn.universal.errors import NumericsError

f32 = np.float32


def _host(tensor: torch.Tensor, name: str) -> np.ndarray:
    if tensor.device.type != "cpu":
        raise NumericsError(
            f"compute.numerics universal: {name} is on {tensor.device}; this install's universal "
            "backend is the CPU's (set compute.device: cpu)"
        )
    if tensor.dtype != torch.float32 and tensor.dtype != torch.uint8:
        raise NumericsError(f"compute.numerics universal: {name} is {tensor.dtype}, not float32")
    return np.ascontiguousarray(tensor.detach().numpy())


def _checked(values: np.ndarray, op: str) -> torch.Tensor:
    if np.isnan(values).any():
        raise NumericsError(f"compute.numerics universal: {op} gave a NaN; the run stops here")
    return torch.from_numpy(values)


def _im2col(x: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """(B, C, H, W) -> (B, OH*OW, C*k*k): each output position's window, (c, ky, kx) in the
    weight's order. A copy, no arithmetic."""
    batch, channels, height, width = x.shape
    out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    windows = np.empty((batch, out_h, out_w, channels, kernel, kernel), x.dtype)
    cpu.kernels().im2col(x, windows, stride)
    return windows.reshape(batch, out_h * out_w, channels * kernel * kernel)


class _Conv2dFunction(torch.autograd.Function):
    """The products with positions as rows: y^T[n] = windows[n] W^T (each output's chain
    over (c, ky, kx)); dW = dy (n, p) windows (a chain over (n, p)); the windows'
    gradient dy^T[n] W (a chain over oc), summed onto the input by col2im."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride: int):
        xs, w = _host(x, "conv2d input"), _host(weight, "conv2d weight")
        out_c, _, kernel, _ = w.shape
        windows = _im2col(xs, kernel, stride)  # (B, P, KC)
        out = np.empty((xs.shape[0], windows.shape[1], out_c), f32)
        cpu.gemm(windows, np.ascontiguousarray(w.reshape(out_c, -1).T)[None], out)
        if bias is not None:
            cpu.kernels().add_column_bias(out.reshape(-1, out_c), _host(bias, "conv2d bias"))
        ctx.save_for_backward(weight)
        ctx.windows, ctx.stride, ctx.x_shape = windows, stride, xs.shape
        side = (xs.shape[2] - kernel) // stride + 1
        channels_first = np.ascontiguousarray(out.transpose(0, 2, 1))
        return _checked(channels_first.reshape(xs.shape[0], out_c, side, -1), "conv2d")

    @staticmethod
    def backward(ctx, grad_out):
        k = cpu.kernels()
        (weight,) = ctx.saved_tensors
        w, windows = _host(weight, "conv2d weight"), ctx.windows
        batch, out_c, out_h, out_w = grad_out.shape
        dy = _host(grad_out, "conv2d gradient").reshape(batch, out_c, -1)
        dy_rows = np.ascontiguousarray(dy.transpose(1, 0, 2)).reshape(1, out_c, -1)
        grad_w = np.empty((1, out_c, windows.shape[2]), f32)
        cpu.gemm(dy_rows, windows.reshape(1, -1, windows.shape[2]), grad_w)
        grad_b = np.empty(out_c, f32)
        k.sum_channel_major(dy, grad_b)
        grad_x = None
        if ctx.needs_input_grad[0]:
            dcols = np.empty(windows.shape, f32)
            cpu.gemm(np.ascontiguousarray(dy.transpose(0, 2, 1)), w.reshape(1, out_c, -1), dcols)
            kernel, channels = w.shape[2], ctx.x_shape[1]
            grad_x = np.empty(ctx.x_shape, f32)
            k.col2im(
                dcols.reshape(batch, out_h, out_w, channels, kernel, kernel), grad_x, ctx.stride
            )
            grad_x = _checked(grad_x, "conv2d input gradient")
        return (
            grad_x,
            _checked(grad_w.reshape(w.shape), "conv2d weight gradient"),
            _checked(grad_b, "conv2d bias gradient"),
            None,
        )


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, transposed):
        k = cpu.kernels()
        xs, w = _host(x, "linear input"), _host(weight, "linear weight")
        out = np.empty((1, xs.shape[0], w.shape[0]), f32)
        cpu.gemm(xs[None], transposed[None], out)
        out = out[0]
        if bias is not None:
            k.add_column_bias(out, _host(bias, "linear bias"))
        ctx.save_for_backward(x, weight)
        return _checked(out, "linear")

    @staticmethod
    def backward(ctx, grad_out):
        k = cpu.kernels()
        x, weight = ctx.saved_tensors
        xs, w, dy = (
            _host(x, "linear input"),
            _host(weight, "linear weight"),
            _host(grad_out, "linear gradient"),
        )
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = np.empty((1, *xs.shape), f32)
            cpu.gemm(dy[None], w[None], grad_x)
            grad_x = _checked(grad_x[0], "linear input gradient")
        grad_w = np.empty((1, *w.shape), f32)
        cpu.gemm(np.ascontiguousarray(dy.T)[None], xs[None], grad_w)
        grad_b = np.empty(w.shape[0], f32)
        k.sum_rows(dy, grad_b)
        return (
            grad_x,
            _checked(grad_w[0], "linear weight gradient"),
            _checked(grad_b, "linear bias gradient"),
            None,
        )


class _ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        xs = _host(x, "relu input")
        out = np.empty_like(xs)
        cpu.kernels().relu(xs, out)
        result = torch.from_numpy(out)
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved_tensors
        grad = _host(grad_out, "relu gradient")
        grad_x = np.empty_like(grad)
        cpu.kernels().relu_grad(grad, _host(out, "relu output"), grad_x)
        return torch.from_numpy(grad_x)


class Conv2d(nn.Conv2d):
    """nn.Conv2d (square kernel and stride, no padding, dilation or groups) on the universal
    kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Conv2dFunction.apply(x, self.weight, self.bias, self.stride[0])


class Linear(nn.Linear):
    """nn.Linear on the universal kernels. The forward multiplies by W's transpose, whose
    copy is kept until the weight's version changes (an optimizer step or a load bumps it:
    universal.optim does), so acting does not copy fc1's 6 MB at every step."""

    _transposed: tuple[tuple[int, int], np.ndarray] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (self.weight._version, self.weight.data_ptr())
        if self._transposed is None or self._transposed[0] != key:
            weight = _host(self.weight, "linear weight")
            self._transposed = (key, np.ascontiguousarray(weight.T))
        return _LinearFunction.apply(x, self.weight, self.bias, self._transposed[1])


class ReLU(nn.Module):
    """max(x, 0) with -0 and 0 both +0, on the universal kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReLUFunction.apply(x)


def scale_frames(frames: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to fl32(x / 255): the network's input."""
    pixels = _host(frames, "frames")
    out = np.empty(pixels.shape, f32)
    cpu.kernels().scale_frames(pixels, out)
    return torch.from_numpy(out)


def check_supported(module: nn.Module) -> None:
    """Refuse, in one line naming it, a layer the universal mode does not compute."""
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Conv2d) and not isinstance(layer, Conv2d):
            raise NumericsError(f"compute.numerics universal: {name} is torch's {type(layer)}")
        if isinstance(layer, Conv2d) and (
            layer.padding != (0, 0)
            or layer.dilation != (1, 1)
            or layer.groups != 1
            or layer.stride[0] != layer.stride[1]
            or layer.kernel_size[0] != layer.kernel_size[1]
        ):
            raise NumericsError(
                f"compute.numerics universal: {name} needs a square kernel and stride, "
                "no padding, dilation or groups"
            )


def init_uniform_(tensor: torch.Tensor, fan_in: int, generator: torch.Generator) -> None:
    """U(-b, b), b = fl32(1 / sqrt(fan_in)), in the spec's arithmetic: 24 random bits u from
    the generator (integers: the same on every machine), then w = fma(u * 2^-24, 2b, -b)."""
    bound = f32(1.0 / math.sqrt(fan_in))
    bits = torch.randint(0, 1 << 24, tensor.shape, generator=generator, dtype=torch.int64)
    unit = (bits.numpy().astype(np.float64) * 2.0**-24).astype(f32)  # exact
    values = np.empty(unit.size, f32)
    two_b, minus_b = np.full_like(unit, bound * f32(2)), np.full_like(unit, -bound)
    cpu.kernels().fma_elementwise(unit.reshape(-1), two_b.reshape(-1), minus_b.reshape(-1), values)
    with torch.no_grad():
        tensor.copy_(torch.from_numpy(values.reshape(tensor.shape)))
