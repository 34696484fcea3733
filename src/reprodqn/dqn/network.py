"""The Q-networks of Mnih et al.: Nature 2015 (the paper's main text) and NIPS 2013, with
one Q head or a dueling head: a value and an advantage stream on the same torso.

Dueling (Wang et al. 2016): Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a').

On a CPU every layer runs in oneDNN (`OneDnnConv2d`, `OneDnnLinear`), chosen by hand rather
than by torch's dispatch, which sends a linear layer, and a small convolution at batch 1, to
MKL's sgemm. MKL's fast branches give other bits on AMD than on Intel; its one
vendor-independent branch (COMPATIBLE) ran 2.5x slower. oneDNN's kernels, pinned to AVX2 by
the portable floor, give the same bits on both vendors at the speed of MKL's fastest
(docs/replication.md; bench/determinism_overhead.py). Elsewhere (CUDA) torch dispatches.

Layers are built without initialisation (`uninitialised`) and then initialised from the
init stream alone, with PyTorch's default scheme: weights and biases uniform in
±1/sqrt(fan_in) (what kaiming_uniform(a=sqrt(5)) gives, and what torch 0.3 used).

With `numerics="universal"` every layer, the ReLUs and the input scaling are
reprodqn.universal's, and the uniform draws are mapped to weights in the spec's arithmetic:
the same network, computed in one written order on every machine.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
from torch import nn

from reprodqn.determinism.global_generators import uninitialised
from reprodqn.universal import api as universal_api
from reprodqn.universal import host as universal_host
from reprodqn.universal import layers as universal

# (out_channels, kernel, stride) per conv layer, then the hidden width
ARCHITECTURES = {
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),
    "nips": ([(16, 8, 4), (32, 4, 2)], 256),
}


class OneDnnConv2d(nn.Conv2d):
    """A convolution that runs in oneDNN on a CPU at any batch size (torch's dispatch sends
    a 3x3 kernel at batch 1 to an im2col product in MKL)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        padding = cast(tuple[int, ...], self.padding)  # a number, never 'same' or 'valid', here
        return torch.mkldnn_convolution(
            x, self.weight, self.bias, padding, self.stride, self.dilation, self.groups
        )


class OneDnnLinear(nn.Linear):
    """A linear layer that runs in oneDNN's inner product on a CPU, forward and backward
    (torch's dispatch sends it to MKL's sgemm). oneDNN takes the input in its own layout
    and the weight as it is; both conversions are differentiable."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        return torch._C._nn.mkldnn_linear(x.to_mkldnn(), self.weight, self.bias).to_dense()


# the layer kinds of each numerics mode: convolution, linear, activation
LAYERS = {
    "standard": (OneDnnConv2d, OneDnnLinear, nn.ReLU),
    "universal": (universal.Conv2d, universal.Linear, universal.ReLU),
}


def _head(features: int, hidden: int, outputs: int, numerics: str) -> list[nn.Module]:
    _, linear, relu = LAYERS[numerics]
    return [uninitialised(linear, features, hidden), relu(), uninitialised(linear, hidden, outputs)]


class QNetwork(nn.Module):
    """uint8 frame stacks (B, history, H, W) -> Q-values (B, n_actions). Dueling: `layers`
    is the torso alone, and each stream has its own hidden layer of the torso's width."""

    def __init__(
        self,
        kind: str,
        n_actions: int,
        history_length: int,
        screen_size: int,
        dueling: bool = False,
        numerics: str = "standard",
    ):
        super().__init__()
        convs, hidden = ARCHITECTURES[kind]
        conv, _, relu = LAYERS[numerics]
        layers: list[nn.Module] = []
        channels, side = history_length, screen_size
        for out_channels, kernel, stride in convs:
            layers += [uninitialised(conv, channels, out_channels, kernel, stride), relu()]
            channels, side = out_channels, (side - kernel) // stride + 1
        layers.append(nn.Flatten())
        features = channels * side * side
        if dueling:
            self.layers = nn.Sequential(*layers)
            self.value = nn.Sequential(*_head(features, hidden, 1, numerics))
            self.advantage = nn.Sequential(*_head(features, hidden, n_actions, numerics))
        else:
            self.layers = nn.Sequential(*layers, *_head(features, hidden, n_actions, numerics))
        self.kind = kind
        self.dueling = dueling
        self.numerics = numerics

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.numerics == "universal":
            if universal_host.applies(frames):  # no gradient: the kernels without torch
                return universal_host.q_network(self, frames)
            features = self.layers(universal.scale_frames(frames))
            if not self.dueling:
                return features
            for_value, for_advantage = universal.fork(features)  # two readers: their sum
            return universal.dueling(self.value(for_value), self.advantage(for_advantage))
        # a fresh float32 copy scaled in place: the same bits as x / 255, one buffer fewer
        x = self.layers(frames.to(torch.float32, copy=True).div_(255.0))
        if not self.dueling:
            return x
        advantage = self.advantage(x)
        return self.value(x) + (advantage - advantage.mean(dim=1, keepdim=True))


@torch.inference_mode()
def q_values(net: nn.Module, states: np.ndarray, chunk: int) -> np.ndarray:
    """Q-values of many states, computed in fixed-size chunks (the last one zero-padded).

    Convolution and matrix kernels pick their algorithm by batch size, so Q(s) computed in
    a batch of 1 and in a batch of 100 can differ in the last bits (measured: 2e-8 with
    oneDNN). With every chunk the same size, a state's Q-values do not depend on how many
    other states share its batch, or which: evaluating episodes together or one at a time
    gives the same actions. The universal kernels are batch-invariant (each output its own
    chain), so a universal network takes all the states in one batch.
    """
    device = next(net.parameters()).device
    count = len(states)
    if getattr(net, "numerics", "standard") == "universal":
        chunk = max(count, 1)  # every output its own chain: one batch, no padding
    padded = -(-count // chunk) * chunk
    if padded != count:
        states = np.concatenate(
            [states, np.zeros((padded - count, *states.shape[1:]), states.dtype)]
        )
    frames = torch.from_numpy(states).to(device)
    out = torch.cat([net(frames[i : i + chunk]) for i in range(0, padded, chunk)])
    return out[:count].cpu().numpy()


def build_q_network(
    kind: str,
    n_actions: int,
    history_length: int,
    screen_size: int,
    generator: torch.Generator,
    dueling: bool = False,
    numerics: str = "standard",
) -> QNetwork:
    """A Q-network on the CPU whose weights depend on `generator` only (layer by layer in
    order: torso, then value, then advantage stream)."""
    net = QNetwork(kind, n_actions, history_length, screen_size, dueling, numerics)
    if numerics == "universal":  # the same scheme in the spec's arithmetic
        universal_api.init_(net, generator)
        return net
    with torch.no_grad():
        for layer in net.modules():
            if isinstance(layer, nn.Conv2d | nn.Linear):
                fan_in = layer.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in)
                nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                if layer.bias is not None:
                    nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return net
