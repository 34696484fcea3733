"""Which kernels compute a tensor's universal arithmetic: the CPU's (cpu.py, numba and LLVM)
for a CPU tensor, the GPU's (cuda.py, Triton) for a CUDA one. Both take torch tensors and
write their outputs in place, in the same written order, so the layers, losses and
optimizers are written once. `use("triton")` runs cuda.py's kernels on CPU tensors too,
under Triton's interpreter: how a machine without a GPU checks the GPU's order.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import torch

from reprodqn.universal.errors import NumericsError
from reprodqn.universal.guard import unwatched

KERNELS = (
    "gemm",
    "pack",
    "windows",
    "conv_weight_gradient",
    "conv_input_gradient",
    "add_column_bias",
    "sum_rows",
    "sum_channel_major",
    "scale_frames",
    "relu",
    "relu_grad",
    "fma_elementwise",
    "rmsprop",
    "rmsprop_centered",
    "adam",
    "sum_squares",
    "scale",
)
_chosen = {"cpu": "numba"}


def use(cpu_backend: str) -> None:
    """numba (the default) or triton: which kernels compute a CPU tensor's arithmetic."""
    if cpu_backend not in ("numba", "triton"):
        raise NumericsError(f"universal backend {cpu_backend!r}: expected numba or triton")
    _chosen["cpu"] = cpu_backend


def cpu_backend() -> str:
    return _chosen["cpu"]


def _as_numpy(value):
    if not isinstance(value, torch.Tensor):
        return value
    return value.detach().numpy() if value.requires_grad else value.numpy()


def _numba() -> SimpleNamespace:
    from reprodqn.universal import cpu

    return _numba_kernels(cpu.threads() > 1)


@functools.cache
def _numba_kernels(parallel: bool) -> SimpleNamespace:
    """cpu.py's kernels (with numba's threads or without) on torch tensors: numpy views of
    the same memory."""
    from reprodqn.universal import convolution, cpu, product

    compiled = {
        **vars(cpu._kernels(parallel)),
        "conv_weight_gradient": convolution.weight_gradient,
        "conv_input_gradient": convolution.input_gradient,
    }

    def wrapped(kernel):
        return unwatched(lambda *args: kernel(*(_as_numpy(value) for value in args)))

    own = ("pack", "windows")
    found = {name: wrapped(compiled[name]) for name in KERNELS if name not in own}
    return SimpleNamespace(
        **found,
        pack=unwatched(lambda b: torch.from_numpy(product.pack(_as_numpy(b)))),
        windows=lambda x, kernel, stride: convolution.windows(_as_numpy(x), kernel, stride),
    )


@functools.cache
def _triton() -> SimpleNamespace:
    from reprodqn.universal import cuda

    return SimpleNamespace(**{name: getattr(cuda, name) for name in KERNELS})


def kernels_for(tensor: torch.Tensor) -> SimpleNamespace:
    if tensor.device.type == "cuda" or _chosen["cpu"] == "triton":
        return _triton()
    if tensor.device.type != "cpu":
        raise NumericsError(
            f"compute.numerics universal: a tensor is on {tensor.device}; the universal "
            "backends are the CPU's and CUDA's"
        )
    return _numba()


def operand(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """A kernel's input: float32 (or uint8 frames), contiguous, outside autograd."""
    if tensor.dtype not in (torch.float32, torch.uint8):
        raise NumericsError(f"compute.numerics universal: {name} is {tensor.dtype}, not float32")
    return tensor.detach().contiguous()


def checked(values: torch.Tensor, op: str) -> torch.Tensor:
    """The output, unless it holds a NaN: the run stops naming the op (a NaN's payload
    differs between machines)."""
    if values.device.type == "cpu" and _chosen["cpu"] == "numba":
        nan_free(values.detach().contiguous().numpy(), op)
    elif bool(torch.isnan(values).any()):
        raise NumericsError(f"compute.numerics universal: {op} gave a NaN; the run stops here")
    return values


def nan_free(values: np.ndarray, op: str) -> np.ndarray:
    """`checked` for a numpy array on the CPU: one numba pass, nothing allocated."""
    from reprodqn.universal import cpu

    if cpu.kernels().holds_nan(values):
        raise NumericsError(f"compute.numerics universal: {op} gave a NaN; the run stops here")
    return values


def host(tensor: torch.Tensor, name: str) -> np.ndarray:
    """A small tensor (Q-values, targets) as numpy on the host, for learning.py's loops."""
    return operand(tensor, name).cpu().numpy()
