"""Named random streams: every random draw in reprodqn comes from one of these.

Each stream is its own numpy PCG64 generator seeded from its own params seed, so varying
one source of nondeterminism (the paper's method) leaves every other stream untouched.
Nothing here or elsewhere touches Python's, numpy's or torch's global generators.
"""

from __future__ import annotations

import numpy as np

STREAM_NAMES = ("init", "exploration", "minibatch", "sticky", "noop", "candidates", "selection")


class Streams:
    """A fixed set of named generators with JSON-serialisable state for exact resume."""

    def __init__(self, seeds: dict[str, int]):
        unknown = set(seeds) - set(STREAM_NAMES)
        if unknown:
            raise ValueError(f"unknown random streams {sorted(unknown)}")
        self.seeds = dict(seeds)
        self._generators = {
            name: np.random.Generator(np.random.PCG64(seed)) for name, seed in seeds.items()
        }

    def __getitem__(self, name: str) -> np.random.Generator:
        return self._generators[name]

    def get_state(self) -> dict:
        return {name: gen.bit_generator.state for name, gen in self._generators.items()}

    def set_state(self, state: dict) -> None:
        if set(state) != set(self._generators):
            raise ValueError(f"stream state names {sorted(state)} != {sorted(self._generators)}")
        for name, gen_state in state.items():
            self._generators[name].bit_generator.state = gen_state


def torch_generator(seed: int):
    """A CPU torch generator for weight initialisation (the init stream)."""
    import torch

    return torch.Generator(device="cpu").manual_seed(seed)
