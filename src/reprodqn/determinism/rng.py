"""Named random streams: every random draw in reprodqn comes from one of these.

Each stream is its own generator seeded from its own params seed, so varying one source
of nondeterminism (the paper's method) leaves every other stream untouched. The family is
a param (seeds.generator): the authors' numpy RandomState per stream, with their draw
calls, so the same seeds give the authors' exploration, no-op, sticky and minibatch
decisions; or numpy's PCG64.
Nothing here or elsewhere touches Python's, numpy's or torch's global generators.
This module is the one owner of the stream names and of how a stream is made.
"""

from __future__ import annotations

from typing import Literal, Protocol, get_args

import numpy as np

# the seeds a run has (params: seeds.*); `init` seeds the torch generator of the weights
RunStream = Literal["init", "exploration", "minibatch", "sticky", "noop"]
Family = Literal["authors", "pcg64"]  # params: seeds.generator

RUN_STREAMS: tuple[str, ...] = get_args(RunStream)
TRAINING_STREAMS = RUN_STREAMS[1:]  # the numpy streams of a training run
ACTOR_STREAMS = ("exploration", "sticky", "noop")  # one each per lockstep actor
GAME_STREAMS = ("sticky", "noop")  # drawn inside a game (its emulator and episode starts)
STUDY_STREAMS = ("candidates", "selection")  # start-state generation (params: start_states)
STREAM_NAMES = (*RUN_STREAMS, *STUDY_STREAMS)
GENERATOR = "numpy.random.Generator(PCG64)"
FAMILIES: tuple[str, ...] = get_args(Family)


def stream(seed: int) -> np.random.Generator:
    """A PCG64 generator from its seed, for the start-state draws (candidates, selection),
    whose generating code the authors did not publish."""
    return np.random.Generator(np.random.PCG64(seed))


class Stream(Protocol):
    """One named stream of draws, whichever family makes it."""

    def uniform(self) -> float: ...
    def integer(self, low: int, high: int) -> int: ...
    def get_state(self) -> dict: ...
    def set_state(self, state: dict) -> None: ...


class AuthorsStream:
    """numpy.random.RandomState(seed) (MT19937), one per source, drawn with the authors'
    calls: uniform(0, 1) and randint(low, high) (repro_dqn dqn/main.py, utils.py,
    dqn.py, replaybuffer.py, ale_wrapper.py)."""

    family = "authors"

    def __init__(self, seed: int, actor: int = 0):
        self.generator = np.random.RandomState(seed if actor == 0 else [seed, actor])

    def uniform(self) -> float:
        return float(self.generator.uniform(0, 1))

    def integer(self, low: int, high: int) -> int:
        """Uniform in [low, high)."""
        return int(self.generator.randint(low, high))

    def get_state(self) -> dict:
        return self.generator.get_state(legacy=False)

    def set_state(self, state: dict) -> None:
        key = np.array(state["state"]["key"], dtype=np.uint32)
        self.generator.set_state({**state, "state": {**state["state"], "key": key}})


class PCG64Stream:
    """numpy's PCG64 Generator with the same two draws: random() and integers(low, high)."""

    family = "pcg64"

    def __init__(self, seed: int, actor: int = 0):
        self.generator = (
            stream(seed)
            if actor == 0
            else np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, actor])))
        )

    def uniform(self) -> float:
        return float(self.generator.random())

    def integer(self, low: int, high: int) -> int:
        """Uniform in [low, high)."""
        return int(self.generator.integers(low, high))

    def get_state(self) -> dict:
        return dict(self.generator.bit_generator.state)

    def set_state(self, state: dict) -> None:
        self.generator.bit_generator.state = state


def make_stream(family: str, seed: int, actor: int = 0) -> AuthorsStream | PCG64Stream:
    """The stream of `seed`; with lockstep actors (train.actors > 1), actor k > 0 draws from
    its own stream seeded with the pair (seed, k): RandomState([seed, k]) (MT19937's
    init_by_array) or PCG64(SeedSequence([seed, k])). Actor 0 keeps the run's own stream."""
    if family not in FAMILIES:
        raise ValueError(f"unknown generator family {family!r}")
    return (AuthorsStream if family == "authors" else PCG64Stream)(seed, actor)


class Streams:
    """A fixed set of named streams with JSON-and-array state for exact resume (one actor's
    when `actor` is given: see make_stream)."""

    def __init__(self, seeds: dict[str, int], family: str, actor: int = 0):
        unknown = set(seeds) - set(STREAM_NAMES)
        if unknown:
            raise ValueError(f"unknown random streams {sorted(unknown)}")
        self.seeds = dict(seeds)
        self._streams = {name: make_stream(family, seed, actor) for name, seed in seeds.items()}

    def __getitem__(self, name: str) -> Stream:
        return self._streams[name]

    def get_state(self) -> dict:
        return {name: s.get_state() for name, s in self._streams.items()}

    def set_state(self, state: dict) -> None:
        if set(state) != set(self._streams):
            raise ValueError(f"stream state names {sorted(state)} != {sorted(self._streams)}")
        for name, stream_state in state.items():
            self._streams[name].set_state(stream_state)


def torch_generator(seed: int):
    """A CPU torch generator for weight initialisation (the init stream)."""
    import torch

    return torch.Generator(device="cpu").manual_seed(seed)
