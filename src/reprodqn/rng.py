"""Named random streams: every random draw in reprodqn comes from one of these.

Each stream is its own numpy PCG64 generator seeded from its own params seed, so varying
one source of nondeterminism (the paper's method) leaves every other stream untouched.
Nothing here or elsewhere touches Python's, numpy's or torch's global generators.
This module is the one owner of the stream names and of how a stream is made.
"""

from __future__ import annotations

import numpy as np

# the numpy streams of a training run; `init` seeds the torch generator of the weights
TRAINING_STREAMS = ("exploration", "minibatch", "sticky", "noop")
RUN_STREAMS = ("init", *TRAINING_STREAMS)  # the seeds a run has (params: seeds.*)
STUDY_STREAMS = ("candidates", "selection")  # start-state generation (params: start_states)
STREAM_NAMES = (*RUN_STREAMS, *STUDY_STREAMS)
GENERATOR = "numpy.random.Generator(PCG64)"


def stream(seed: int) -> np.random.Generator:
    """A fresh stream from its seed (for streams made per use: an evaluation episode's
    sticky stream, the candidates and selection draws)."""
    return np.random.Generator(np.random.PCG64(seed))


class Streams:
    """A fixed set of named generators with JSON-serialisable state for exact resume."""

    def __init__(self, seeds: dict[str, int]):
        unknown = set(seeds) - set(STREAM_NAMES)
        if unknown:
            raise ValueError(f"unknown random streams {sorted(unknown)}")
        self.seeds = dict(seeds)
        self._generators = {name: stream(seed) for name, seed in seeds.items()}

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
