"""The universal layers: Conv2d, Linear, ReLU and the frame scaling as torch modules whose
forward and backward run the universal kernels (backend.py: the CPU's or the GPU's), bit
for bit the spec's (reference.py). torch only stores and moves the data: each layer is an
autograd Function whose arithmetic is the kernels', and every output is checked for NaN,
which stops the run naming the op (a NaN's payload differs between machines).

The weights and state-dict names are nn.Conv2d's and nn.Linear's, so a module built of
these saves, loads and checkpoints as its standard twin does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from reprodqn.universal.backend import checked, host, kernels_for, operand
from reprodqn.universal.errors import NumericsError
from reprodqn.universal.guard import unwatched
from reprodqn.universal.reference import add_sequence

f32 = np.float32


class _Conv2dFunction(torch.autograd.Function):
    """The products with positions as rows: y^T[n] = windows[n] W^T (each output's chain
    over (c, ky, kx)); dW = dy (n, p) windows (a chain over (n, p)); the windows'
    gradient dy^T[n] W (a chain over oc), summed onto the input pixel by pixel in (ky, kx)
    order. How each backend lays these out (windows read in place on a CPU, an im2col copy
    on a GPU) is its own: the chains are the spec's."""

    @staticmethod
    @unwatched
    def forward(ctx, x, weight, bias, stride: int, packed_t):
        k = kernels_for(x)
        xs, w = operand(x, "conv2d input"), operand(weight, "conv2d weight")
        out_c, _, kernel, _ = w.shape
        side = (xs.shape[2] - kernel) // stride + 1
        windows = k.windows(xs, kernel, stride)  # (B, P, KC)
        out = xs.new_empty((xs.shape[0], side * side, out_c))
        k.gemm(windows, packed_t, out)
        if bias is not None:
            k.add_column_bias(out.view(-1, out_c), operand(bias, "conv2d bias"))
        ctx.save_for_backward(weight)
        ctx.windows, ctx.stride, ctx.x = windows, stride, xs  # x: the windows read it
        channels_first = out.permute(0, 2, 1).contiguous()
        return checked(channels_first.view(xs.shape[0], out_c, side, -1), "conv2d")

    @staticmethod
    @unwatched
    def backward(ctx, grad_out):
        k = kernels_for(grad_out)
        (weight,) = ctx.saved_tensors
        w = operand(weight, "conv2d weight")
        dy = operand(grad_out, "conv2d gradient")
        batch, out_c = dy.shape[:2]
        grad_w = w.new_empty((out_c, w[0].numel()))
        k.conv_weight_gradient(dy.view(batch, out_c, -1), ctx.windows, grad_w)
        grad_b = w.new_empty(out_c)
        k.sum_channel_major(dy.view(batch, out_c, -1), grad_b)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = w.new_empty(ctx.x.shape)
            k.conv_input_gradient(dy, w, grad_x, ctx.stride)
            grad_x = checked(grad_x, "conv2d input gradient")
        return (
            grad_x,
            checked(grad_w.view(w.shape), "conv2d weight gradient"),
            checked(grad_b, "conv2d bias gradient"),
            None,
            None,
        )


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    @unwatched
    def forward(ctx, x, weight, bias, packed_t):
        k = kernels_for(x)
        xs, w = operand(x, "linear input"), operand(weight, "linear weight")
        out = xs.new_empty((1, xs.shape[0], w.shape[0]))
        k.gemm(xs[None], packed_t, out)
        out = out[0]
        if bias is not None:
            k.add_column_bias(out, operand(bias, "linear bias"))
        ctx.save_for_backward(x, weight)
        return checked(out, "linear")

    @staticmethod
    @unwatched
    def backward(ctx, grad_out):
        k = kernels_for(grad_out)
        x, weight = ctx.saved_tensors
        xs, w, dy = (
            operand(x, "linear input"),
            operand(weight, "linear weight"),
            operand(grad_out, "linear gradient"),
        )
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = dy.new_empty((1, *xs.shape))
            k.gemm(dy[None], w[None], grad_x)
            grad_x = checked(grad_x[0], "linear input gradient")
        grad_w = dy.new_empty((1, *w.shape))
        k.gemm(dy.t().contiguous()[None], xs[None], grad_w)
        grad_b = dy.new_empty(w.shape[0])
        k.sum_rows(dy, grad_b)
        return (
            grad_x,
            checked(grad_w[0], "linear weight gradient"),
            checked(grad_b, "linear bias gradient"),
            None,
        )


class _ReLUFunction(torch.autograd.Function):
    @staticmethod
    @unwatched
    def forward(ctx, x):
        xs = operand(x, "relu input")
        out = torch.empty_like(xs)
        kernels_for(xs).relu(xs, out)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @unwatched
    def backward(ctx, grad_out):
        (out,) = ctx.saved_tensors
        grad = operand(grad_out, "relu gradient")
        grad_x = torch.empty_like(grad)
        kernels_for(grad).relu_grad(grad, operand(out, "relu output"), grad_x)
        return grad_x


class _ForkFunction(torch.autograd.Function):
    """Two copies of x whose gradients meet as fma(g1, 1, g2) = fl(g1 + g2): where torch's
    autograd would add them with its own kernel (a tensor read by two layers)."""

    @staticmethod
    @unwatched
    def forward(ctx, x):
        return x.clone(), x.clone()

    @staticmethod
    @unwatched
    def backward(ctx, first, second):
        a, b = operand(first, "fork gradient"), operand(second, "fork gradient")
        out = torch.empty_like(a)
        kernels_for(a).fma_elementwise(a.view(-1), torch.ones_like(a).view(-1), b.view(-1),
                                       out.view(-1))  # fmt: skip
        return checked(out, "fork gradient")


def fork(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x for two readers (a policy and a value head on one torso), their gradients summed in
    the universal arithmetic."""
    return _ForkFunction.apply(x)


class _DuelingFunction(torch.autograd.Function):
    """Q = fl(v + fl(a - m)), m = fl(the row's advantages summed in column order from +0 / A).
    Gradients: dv = the row's g summed in column order from +0; da = fl(g - fl(dv / A))."""

    @staticmethod
    @unwatched
    def forward(ctx, value, advantage):
        v, a = host(value, "dueling value"), host(advantage, "dueling advantage")
        q = dueling_values(v, a)
        ctx.shapes, ctx.device = (value.shape, a.shape), advantage.device
        return checked(torch.from_numpy(q).to(advantage.device), "dueling head")

    @staticmethod
    @unwatched
    def backward(ctx, grad_q):
        g = host(grad_q, "dueling gradient")
        grad_v = add_sequence(g, axis=1)
        grad_a = g - (grad_v / f32(g.shape[1]))[:, None]
        value_shape, _ = ctx.shapes
        return (
            torch.from_numpy(grad_v.reshape(value_shape)).to(ctx.device),
            torch.from_numpy(np.ascontiguousarray(grad_a)).to(ctx.device),
        )


def dueling_values(v: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Q = fl(v + fl(a - m)), m = fl(the row's advantages summed in column order / A)."""
    total = add_sequence(a, axis=1)
    return v.reshape(-1, 1) + (a - (total / f32(a.shape[1]))[:, None])


def dueling(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Wang et al.'s head: Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a'), in the spec's order
    (a minibatch's few values, on the host)."""
    return _DuelingFunction.apply(value, advantage)


def packed_transpose(layer: nn.Conv2d | nn.Linear) -> torch.Tensor:
    """W^T (inputs by outputs) as the backend's gemm reads it (product.pack's panels), kept on
    the layer until the weight's version changes (an optimizer step or a load bumps it:
    universal.optim does), so acting does not copy the weights at every step."""
    weight = layer.weight
    key = (weight._version, weight.data_ptr(), weight.device)
    kept = layer.__dict__.get("_packed_t")
    if kept is None or kept[0] != key:
        w = operand(weight, f"{type(layer).__name__} weight")
        kept = (key, kernels_for(w).pack(w.view(w.shape[0], -1).t()[None]))
        layer.__dict__["_packed_t"] = kept
    return kept[1]


class Conv2d(nn.Conv2d):
    """nn.Conv2d (square kernel and stride, no padding, dilation or groups) on the universal
    kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_layer(self)  # here too: weights loaded from anywhere, settings set after init
        return _Conv2dFunction.apply(
            x, self.weight, self.bias, self.stride[0], packed_transpose(self)
        )


class Linear(nn.Linear):
    """nn.Linear on the universal kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LinearFunction.apply(x, self.weight, self.bias, packed_transpose(self))


class ReLU(nn.Module):
    """max(x, 0) with -0 and 0 both +0, on the universal kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ReLUFunction.apply(x)


def scale_frames(frames: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to fl32(x / 255): the network's input."""
    pixels = operand(frames, "frames")
    out = torch.empty(pixels.shape, dtype=torch.float32, device=pixels.device)
    kernels_for(pixels).scale_frames(pixels, out)
    return out


def check_layer(layer: nn.Conv2d, name: str = "") -> None:
    """Refuse, in one line naming it, a convolution the universal kernels do not compute."""
    label = name or type(layer).__name__
    if not isinstance(layer, Conv2d):
        raise NumericsError(f"compute.numerics universal: {label} is torch's {type(layer)}")
    if (
        layer.padding != (0, 0)
        or layer.dilation != (1, 1)
        or layer.groups != 1
        or layer.stride[0] != layer.stride[1]
        or layer.kernel_size[0] != layer.kernel_size[1]
        or layer.padding_mode != "zeros"
    ):
        raise NumericsError(
            f"compute.numerics universal: {label} (kernel {layer.kernel_size}, stride "
            f"{layer.stride}, padding {layer.padding}, dilation {layer.dilation}, groups "
            f"{layer.groups}) needs a square kernel and stride, no padding, dilation or groups"
        )


def check_supported(module: nn.Module) -> None:
    """Refuse, in one line naming it, a layer the universal mode does not compute."""
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Conv2d):
            check_layer(layer, name)


def init_uniform_(tensor: torch.Tensor, fan_in: int, generator: torch.Generator) -> None:
    """U(-b, b), b = fl32(1 / sqrt(fan_in)), in the spec's arithmetic: 24 random bits u from
    the generator (integers: the same on every machine), then w = fma(u * 2^-24, 2b, -b)."""
    bound = f32(1.0 / math.sqrt(fan_in))
    bits = torch.randint(0, 1 << 24, tensor.shape, generator=generator, dtype=torch.int64)
    unit = torch.from_numpy((bits.numpy().astype(np.float64) * 2.0**-24).astype(f32))  # exact
    unit = unit.reshape(-1).to(tensor.device)
    values = torch.empty_like(unit)
    two_b = torch.full_like(unit, float(bound * f32(2)))
    minus_b = torch.full_like(unit, float(-bound))
    kernels_for(values).fma_elementwise(unit, two_b, minus_b, values)
    with torch.no_grad():
        tensor.copy_(values.view(tensor.shape))
