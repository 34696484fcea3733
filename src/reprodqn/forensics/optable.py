"""What torch's own documentation says about each aten op's determinism on CUDA: made
deterministic by `torch.use_deterministic_algorithms(True)`, raising under it, or needing
cuBLAS's workspace setting. There is no machine-readable list in torch, so this is one,
transcribed by hand for one torch version; tests/forensics/test_audit.py fails when the installed
torch differs from it, or when its docstring's lists no longer match these entries."""

from __future__ import annotations

TORCH_VERSION = "2.13.0"
# SHA-256 of the docstring's two lists as transcribed: a torch whose lists differ fails a test
DOC_LISTS_SHA256 = "654d483b4e8960e6d4ed204eb6cebb4bf9a6f761332faf6237a5960822a28158"
DOC_LISTS = (
    "The following normally-nondeterministic operations will act",
    "In addition, several operations fill uninitialized memory",
)
SOURCES = (
    "torch.use_deterministic_algorithms.__doc__ (torch 2.13.0): the two lists of "
    "normally-nondeterministic operations",
    "docs/source/notes/randomness.rst (torch 2.13): cuBLAS needs "
    "CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8); cuDNN convolution needs "
    "torch.backends.cudnn.benchmark = False",
    "aten/src/ATen/native/cuda/ScatterGatherKernel.cu: alertNotDeterministic("
    '"scatter_add_cuda") (the backward of gather)',
)

DETERMINISTIC_UNDER_FLAG = "made deterministic by use_deterministic_algorithms"
RAISES_UNDER_FLAG = "raises under use_deterministic_algorithms (no deterministic kernel)"
CUBLAS = "deterministic on CUDA only with CUBLAS_WORKSPACE_CONFIG set (else the flag raises)"
NOT_LISTED = "not listed as nondeterministic"

# aten base name -> (status, the documentation's words for it)
_CONV = "torch.nn.Conv1d/2d/3d, ConvTranspose1d/2d/3d when called on CUDA tensor"
_MADE = {
    "convolution": _CONV,
    "_convolution": _CONV,
    "convolution_backward": _CONV,
    "cudnn_convolution": _CONV,
    "cudnn_convolution_transpose": _CONV,
    "conv2d": _CONV,
    "conv1d": _CONV,
    "conv3d": _CONV,
    "replication_pad1d_backward": "ReplicationPad1d when differentiating a CUDA tensor",
    "replication_pad2d_backward": "ReplicationPad2d when differentiating a CUDA tensor",
    "replication_pad3d_backward": "ReplicationPad3d when differentiating a CUDA tensor",
    "bmm": "torch.bmm when called on sparse-dense CUDA tensors",
    "index": "Tensor.__getitem__ when differentiating a CPU tensor indexed by tensors",
    "index_put": "Tensor.index_put (accumulate=False; accumulate=True on a CPU tensor)",
    "_index_put_impl": "Tensor.index_put (accumulate=False; accumulate=True on a CPU tensor)",
    "put": "Tensor.put_ with accumulate=True on a CPU tensor",
    "scatter_add": "Tensor.scatter_add_ when called on a CUDA tensor",
    "gather": "torch.gather when called on a CUDA tensor that requires grad",
    "index_add": "torch.index_add when called on CUDA tensor",
    "index_select_backward": "torch.index_select when differentiating a CUDA tensor",
    "repeat_interleave": "torch.repeat_interleave when differentiating a CUDA tensor",
    "index_copy": "Tensor.index_copy when called on a CPU or CUDA tensor",
    "scatter": "Tensor.scatter when src is a Tensor, on a CUDA tensor",
    "scatter_reduce": "Tensor.scatter_reduce, reduce='sum' or 'mean', on a CUDA tensor "
    "(reduce='prod' raises)",
    "max_pool3d_with_indices_backward": "MaxPool3d when differentiating a CUDA tensor",
}
_RAISES = {
    "avg_pool3d_backward": "AvgPool3d when differentiating a CUDA tensor",
    "_adaptive_avg_pool2d_backward": "AdaptiveAvgPool2d when differentiating a CUDA tensor",
    "_adaptive_avg_pool3d_backward": "AdaptiveAvgPool3d when differentiating a CUDA tensor",
    "adaptive_max_pool2d_backward": "AdaptiveMaxPool2d when differentiating a CUDA tensor",
    "fractional_max_pool2d_backward": "FractionalMaxPool2d when differentiating a CUDA tensor",
    "fractional_max_pool3d_backward": "FractionalMaxPool3d when differentiating a CUDA tensor",
    "max_unpool2d": "MaxUnpool1d/2d",
    "max_unpool3d": "MaxUnpool3d",
    "upsample_linear1d_backward": "interpolate (linear) when differentiating a CUDA tensor",
    "upsample_bilinear2d_backward": "interpolate (bilinear) when differentiating a CUDA tensor",
    "upsample_bicubic2d_backward": "interpolate (bicubic) when differentiating a CUDA tensor",
    "upsample_trilinear3d_backward": "interpolate (trilinear) when differentiating a CUDA tensor",
    "reflection_pad1d_backward": "ReflectionPad1d when differentiating a CUDA tensor",
    "reflection_pad2d_backward": "ReflectionPad2d when differentiating a CUDA tensor",
    "reflection_pad3d_backward": "ReflectionPad3d when differentiating a CUDA tensor",
    "nll_loss_forward": "NLLLoss when called on a CUDA tensor",
    "nll_loss2d_forward": "NLLLoss when called on a CUDA tensor",
    "_ctc_loss_backward": "CTCLoss when differentiating a CUDA tensor",
    "_embedding_bag_backward": "EmbeddingBag, mode='max', when differentiating a CUDA tensor",
    "histc": "torch.histc when called on a CUDA tensor",
    "bincount": "torch.bincount on a CUDA tensor with weights",
    "median": "torch.median with indices output on a CUDA tensor",
    "grid_sampler_2d_backward": "grid_sample when differentiating a CUDA tensor",
    "grid_sampler_3d_backward": "grid_sample when differentiating a CUDA tensor",
    "cumsum": "torch.cumsum on a floating-point or complex CUDA tensor",
    "resize": "Tensor.resize_ when called with a quantized tensor",
}
_CUBLAS = {
    name: "cuBLAS matrix products (reproducibility notes)"
    for name in (
        "mm",
        "addmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "matmul",
        "linear",
        "_addmm_activation",
    )
}

# oneDNN's forms of the same layers, which a CPU runs (dqn.network): named by what CUDA runs
_MADE.update({name: _CONV + " (a CPU runs it in oneDNN)" for name in ("mkldnn_convolution",)})
_CUBLAS.update(
    {
        name: "cuBLAS matrix products (reproducibility notes): a linear layer, which a "
        "CPU runs in oneDNN's inner product"
        for name in (
            "mkldnn_linear",
            "mkldnn_linear_backward",
            "mkldnn_linear_backward_input",
            "mkldnn_linear_backward_weights",
        )
    }
)

TABLE = {
    **{k: (DETERMINISTIC_UNDER_FLAG, v) for k, v in _MADE.items()},
    **{k: (RAISES_UNDER_FLAG, v) for k, v in _RAISES.items()},
    **{k: (CUBLAS, v) for k, v in _CUBLAS.items()},
}


def base_name(op: str) -> str:
    """'aten.scatter_add_.default' -> 'scatter_add' (the in-place form is the same op)."""
    parts = op.split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    return name[:-1] if name.endswith("_") and not name.startswith("__") else name


def classify(op: str) -> tuple[str, str]:
    """(status on CUDA, the documentation's words) for one aten overload."""
    return TABLE.get(base_name(op), (NOT_LISTED, ""))
