"""Replay for N lockstep actors (train.actors > 1): one authors' memory per actor.

Each actor's frames go to its own ReplayMemory of capacity / N slots, so a state's four
frames never mix actors and the authors' validity rule (no write position, terminal or
episode start inside the window) holds per actor unchanged. Actors store one transition
each per round, so every memory has the same size and write position.

A minibatch index is one draw of the minibatch stream over all actors' ranges together:
j uniform in [0, N (high - low)), actor j mod N, slot low + j div N, with low and high the
authors' per-memory range [history, size - n_step); an invalid draw is dropped and drawn
again, as theirs. Sampled transitions are reported as actor + N slot.
"""

from __future__ import annotations

import numpy as np

from reprodqn.determinism.rng import Stream
from reprodqn.dqn.replay import MAX_REDRAWS, ReplayMemory


class ActorReplay:
    def __init__(self, memories: list[ReplayMemory]):
        self.memories = memories

    def __len__(self) -> int:
        return sum(len(memory) for memory in self.memories)

    @property
    def nbytes(self) -> int:
        return sum(memory.nbytes for memory in self.memories)

    def add(
        self,
        actor: int,
        frame: np.ndarray,
        action: int,
        reward: float,
        terminal: bool,
        episode_time: int,
    ) -> None:
        self.memories[actor].add(frame, action, reward, terminal, episode_time)

    def sample_slots(self, batch_size: int, rng: Stream) -> tuple[np.ndarray, np.ndarray]:
        """(actors, slots) of batch_size valid transitions, in draw order."""
        first = self.memories[0]
        low, high = first.history_length, len(first) - first.n_step
        if high <= low:
            raise ValueError(
                f"each actor's replay memory holds {len(first)} transitions; "
                f"sampling needs at least {first.history_length + 2}"
            )
        n = len(self.memories)
        actors: list[int] = []
        slots: list[int] = []
        redraws = 0
        while len(slots) < batch_size:
            j = rng.integer(0, n * (high - low))
            actor, slot = j % n, low + j // n
            if self.memories[actor].valid(slot):
                actors.append(actor)
                slots.append(slot)
            else:
                redraws += 1
                if redraws > MAX_REDRAWS:
                    raise RuntimeError("replay memory holds no sampleable transition")
        return np.array(actors, dtype=np.int64), np.array(slots, dtype=np.int64)

    def sample(self, batch_size: int, rng: Stream) -> dict[str, np.ndarray]:
        actors, slots = self.sample_slots(batch_size, rng)
        batch: dict[str, np.ndarray] = {}
        for actor in np.unique(actors):
            chosen = actors == actor
            part = self.memories[actor].transitions(slots[chosen])
            for key, values in part.items():
                if key not in batch:
                    batch[key] = np.empty((batch_size, *values.shape[1:]), values.dtype)
                batch[key][chosen] = values
        batch["indices"] = actors + len(self.memories) * slots
        return batch

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {str(actor): memory.get_state() for actor, memory in enumerate(self.memories)}

    def set_state(self, state: dict) -> None:
        if set(state) != {str(actor) for actor in range(len(self.memories))}:
            raise ValueError(
                f"replay state holds actors {sorted(state)}, not 0..{len(self.memories) - 1}"
            )
        for actor, memory in enumerate(self.memories):
            memory.set_state(state[str(actor)])
