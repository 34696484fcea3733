"""The Q-networks of Mnih et al.: Nature 2015 (the paper's main text) and NIPS 2013.

Layers are built without initialisation (`skip_init`) and then initialised from the init
stream alone, with PyTorch's default scheme: weights and biases uniform in
±1/sqrt(fan_in) (what kaiming_uniform(a=sqrt(5)) gives, and what torch 0.3 used).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import skip_init

# (out_channels, kernel, stride) per conv layer, then the hidden width
ARCHITECTURES = {
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),
    "nips": ([(16, 8, 4), (32, 4, 2)], 256),
}


class QNetwork(nn.Module):
    """uint8 frame stacks (B, history, H, W) -> Q-values (B, n_actions)."""

    def __init__(self, kind: str, n_actions: int, history_length: int, screen_size: int):
        super().__init__()
        convs, hidden = ARCHITECTURES[kind]
        layers: list[nn.Module] = []
        channels, side = history_length, screen_size
        for out_channels, kernel, stride in convs:
            layers += [skip_init(nn.Conv2d, channels, out_channels, kernel, stride), nn.ReLU()]
            channels, side = out_channels, (side - kernel) // stride + 1
        layers += [
            nn.Flatten(),
            skip_init(nn.Linear, channels * side * side, hidden),
            nn.ReLU(),
            skip_init(nn.Linear, hidden, n_actions),
        ]
        self.layers = nn.Sequential(*layers)
        self.kind = kind

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.layers(frames.float() / 255.0)


def build_q_network(kind: str, n_actions: int, history_length: int, screen_size: int,
                    generator: torch.Generator) -> QNetwork:
    """A Q-network on the CPU whose weights depend on `generator` only."""
    net = QNetwork(kind, n_actions, history_length, screen_size)
    with torch.no_grad():
        for layer in net.layers:
            if isinstance(layer, nn.Conv2d | nn.Linear):
                fan_in = layer.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in)
                nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return net
