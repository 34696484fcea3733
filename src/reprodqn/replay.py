"""Replay memory that stores one 84x84 uint8 frame per agent step (7.06 GB for 1M steps,
where stored 4-frame stacks of s and s' would take 28 GB) and rebuilds stacks on sampling.

Slot i holds the newest frame of state s_i with the action taken in s_i, the clipped
reward and whether the episode terminated. The next state s_{i+1} ends at slot i+1. A
stack never reaches back past its episode's first frame (those frames are zeros, exactly
as the agent saw them) nor past the oldest stored slot, and a truncated episode stores its
last observation in a slot of its own so the reset frame never stands in for it.
"""

from __future__ import annotations

import numpy as np

_ARRAYS = ("frames", "actions", "rewards", "terminals", "starts", "depths")


class ReplayMemory:
    def __init__(self, capacity: int, history_length: int, frame_size: int):
        self.capacity = capacity
        self.history_length = history_length
        self.frames = np.zeros((capacity, frame_size, frame_size), dtype=np.uint8)
        self.actions = np.zeros(capacity, dtype=np.uint8)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminals = np.zeros(capacity, dtype=bool)
        # a transition starts at this slot (False for a truncated episode's last frame)
        self.starts = np.zeros(capacity, dtype=bool)
        # frames of the episode before this one that a stack may use (capped at history-1)
        self.depths = np.zeros(capacity, dtype=np.uint8)
        self.cursor = 0
        self.size = 0
        self._offsets = np.arange(history_length - 1, -1, -1)  # oldest frame first

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in _ARRAYS)

    # -- writing -----------------------------------------------------------------------------
    def add(self, frame: np.ndarray, action: int, reward: float, terminal: bool,
            first: bool) -> None:
        """Store s_t's newest frame with a_t, r_t and whether the episode ended after it."""
        self._write(frame, first, start=True)
        i = self.cursor
        self.actions[i] = action
        self.rewards[i] = reward
        self.terminals[i] = terminal
        self._advance()

    def add_final(self, frame: np.ndarray) -> None:
        """Store a truncated episode's last observation: the next state of the slot before."""
        self._write(frame, first=False, start=False)
        i = self.cursor
        self.actions[i] = 0
        self.rewards[i] = 0.0
        self.terminals[i] = False
        self._advance()

    def _write(self, frame, first: bool, start: bool) -> None:
        i = self.cursor
        self.frames[i] = frame
        self.starts[i] = start
        if first or self.size == 0:
            self.depths[i] = 0
        else:
            previous = self.depths[(i - 1) % self.capacity]
            self.depths[i] = min(int(previous) + 1, self.history_length - 1)

    def _advance(self) -> None:
        self.cursor = (self.cursor + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    # -- sampling ----------------------------------------------------------------------------
    def valid(self, indices: np.ndarray) -> np.ndarray:
        """Which slots can start a sampled transition."""
        oldest = self.cursor if self.size == self.capacity else 0
        newest = (self.cursor - 1) % self.capacity
        stored_before = (indices - oldest) % self.capacity
        return (
            (indices < self.size)
            & self.starts[indices]
            & (indices != newest)
            & (stored_before >= self.depths[indices])
        )

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform over valid slots: draw, then redraw each invalid one in order."""
        if self.size < 2:
            raise ValueError("replay memory needs at least two frames to sample")
        indices = rng.integers(0, self.size, size=batch_size)
        bad = ~self.valid(indices)
        for position in np.flatnonzero(bad):
            while True:
                candidate = rng.integers(0, self.size, size=1)
                if self.valid(candidate)[0]:
                    indices[position] = candidate[0]
                    break
        return indices

    def stacks(self, indices: np.ndarray) -> np.ndarray:
        """(B, history, H, W) uint8 states ending at `indices`, zeros before episode starts."""
        slots = (indices[:, None] - self._offsets[None, :]) % self.capacity
        stacked = self.frames[slots]
        stacked[self._offsets[None, :] > self.depths[indices][:, None]] = 0
        return stacked

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        indices = self.sample_indices(batch_size, rng)
        # s and s' share all but one frame: gather history+1 frames once, then mask each
        span = self.history_length + 1
        slots = (indices[:, None] - np.arange(span - 2, -2, -1)[None, :]) % self.capacity
        frames = self.frames[slots]
        states, next_states = frames[:, :-1].copy(), frames[:, 1:]
        offsets = self._offsets[None, :]
        states[offsets > self.depths[indices][:, None]] = 0
        next_states[offsets > self.depths[slots[:, -1]][:, None]] = 0
        return {
            "indices": indices,
            "states": states,
            "actions": self.actions[indices],
            "rewards": self.rewards[indices],
            "terminals": self.terminals[indices],
            "next_states": next_states,
        }

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        """The write position and the filled part of every array (views, not copies)."""
        arrays = {name: getattr(self, name)[: self.size] for name in _ARRAYS}
        return {"cursor": self.cursor, "size": self.size, **arrays}

    def set_state(self, state: dict) -> None:
        size = int(state["size"])
        for name in _ARRAYS:
            source = state[name]
            if source.shape[0] != size:
                raise ValueError(f"replay array {name} holds {source.shape[0]} rows, not {size}")
            getattr(self, name)[:size] = source
        self.size = size
        self.cursor = int(state["cursor"])
