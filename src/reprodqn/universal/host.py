"""A forward pass with no gradient (acting, evaluation, the TD target's network) on the CPU,
run straight on the CPU backend's kernels over numpy arrays: the same kernels, in the same
order, as the layers' autograd Functions (so the same bits), without their per-call cost
(torch tensors, autograd's bookkeeping, the guard's checks), which at batch 1 was as large
as the arithmetic.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from reprodqn.universal import backend, convolution, cpu, layers
from reprodqn.universal.errors import NumericsError


def applies(frames: torch.Tensor) -> bool:
    """Whether `forward` may stand in for the layers: CPU tensors on the numba kernels,
    no gradient wanted."""
    return (
        frames.device.type == "cpu"
        and backend.cpu_backend() == "numba"
        and not torch.is_grad_enabled()
    )


def _packed(layer: nn.Conv2d | nn.Linear) -> np.ndarray:
    return layers.packed_transpose(layer).numpy()


def _conv(kernels, layer: layers.Conv2d, x: np.ndarray) -> np.ndarray:
    """_Conv2dFunction.forward's arithmetic: windows, product, channel bias."""
    batch, _, height, width = x.shape
    out_c, kernel, stride = layer.out_channels, layer.kernel_size[0], layer.stride[0]
    out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    out = np.empty((batch, out_h * out_w, out_c), np.float32)
    kernels.gemm(convolution.windows(x, kernel, stride), _packed(layer), out)
    if layer.bias is not None:
        kernels.add_column_bias(out.reshape(-1, out_c), layer.bias.detach().numpy())
    channels_first = np.ascontiguousarray(out.transpose(0, 2, 1))
    return backend.nan_free(channels_first.reshape(batch, out_c, out_h, out_w), "conv2d")


def _linear(kernels, layer: layers.Linear, x: np.ndarray) -> np.ndarray:
    out = np.empty((1, x.shape[0], layer.out_features), np.float32)
    kernels.gemm(np.ascontiguousarray(x)[None], _packed(layer), out)
    if layer.bias is not None:
        kernels.add_column_bias(out[0], layer.bias.detach().numpy())
    return backend.nan_free(out[0], "linear")


def sequential(stack: nn.Sequential, x: np.ndarray) -> np.ndarray:
    """The universal layers of `stack` in order (Conv2d, Linear, ReLU, Flatten)."""
    kernels = cpu.kernels()
    for layer in stack:
        if isinstance(layer, layers.Conv2d):
            layers.check_layer(layer)
            x = _conv(kernels, layer, x)
        elif isinstance(layer, layers.Linear):
            x = _linear(kernels, layer, x)
        elif isinstance(layer, layers.ReLU):
            out = np.empty_like(x)
            kernels.relu(x, out)
            x = out
        elif isinstance(layer, nn.Flatten):
            x = x.reshape(x.shape[0], -1)
        else:
            raise NumericsError(
                f"compute.numerics universal: {type(layer).__name__} has no universal forward"
            )
    return x


def scale_frames(frames: np.ndarray) -> np.ndarray:
    out = np.empty(frames.shape, np.float32)
    cpu.kernels().scale_frames(np.ascontiguousarray(frames), out)
    return out


def q_network(net: nn.Module, frames: torch.Tensor) -> torch.Tensor:
    """A QNetwork's Q-values (dueling or not) as its universal layers compute them."""
    stacks: dict[str, nn.Sequential] = dict(net.named_children())  # type: ignore[arg-type]
    features = sequential(stacks["layers"], scale_frames(frames.numpy()))
    if not net.dueling:
        return torch.from_numpy(features)
    value = sequential(stacks["value"], features)
    advantage = sequential(stacks["advantage"], features)
    q = layers.dueling_values(value, advantage)
    return torch.from_numpy(backend.nan_free(q, "dueling head"))
