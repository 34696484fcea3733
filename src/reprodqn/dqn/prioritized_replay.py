"""Proportional prioritized replay over the authors' replay memory: transition i is drawn
with probability p_i^alpha / sum_k p_k^alpha, its leaf in a deterministic sum tree.

After Schaul et al. 2016 (the sum tree is sum_tree.py):

- New transitions enter at the running maximum priority (1 at first); an index that can
  never be sampled (its state spans an episode start, or it lies outside the authors'
  index range) gets priority 0, so draws are not wasted on it.
- Sampling is stratified: the priority mass is cut into batch_size equal segments and one
  uniform draw from the minibatch stream picks a point in each; a point that lands on an
  index not sampleable right now (its window touches the write position) is drawn again
  in the same segment, from the same stream, in order. So the draws depend on the stream
  and the leaves alone.
- New priorities: indices are deduplicated first (the first occurrence in the batch wins),
  then (p + eps)^alpha is computed once, in numpy float64, and written to the leaves.
- The resume state is the memory, the whole tree and the running maximum; a restored tree
  must equal the one rebuilt from its leaves.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import Stream
from reprodqn.dqn.replay import MAX_REDRAWS, ReplayMemory
from reprodqn.dqn.settings import PrioritySettings
from reprodqn.dqn.sum_tree import SumTree, tree_bytes


def check_memory(capacity: int, frame_size: int, physical: int | None = None) -> int:
    """The bytes prioritized replay needs (one frame and its fields per step, plus the
    tree); an InputError naming replay.capacity when this machine's memory cannot hold it."""
    needed = capacity * (frame_size * frame_size + 1 + 4 + 1 + 1 + 1) + tree_bytes(capacity)
    if physical is None:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > physical:
        raise InputError(
            f"replay.capacity ({capacity:,}): prioritized replay needs "
            f"{needed / 2**30:.1f} GiB, this machine has {physical / 2**30:.1f} GiB"
        )
    return needed


def numpy_power(base, exponent: float) -> np.ndarray:
    return np.asarray(base, np.float64) ** exponent


class PrioritizedReplay:
    def __init__(self, memory: ReplayMemory, config: PrioritySettings, power=numpy_power):
        """`power`: how p ** alpha is computed (numpy's, or the universal numerics' power64,
        the same bits on every machine)."""
        self.memory = memory
        self.config = config
        self.power = power
        self.tree = SumTree(memory.capacity)
        self.max_priority = 1.0  # the running max of |delta| + eps, before the exponent

    def __len__(self) -> int:
        return len(self.memory)

    @property
    def nbytes(self) -> int:
        return self.memory.nbytes + self.tree.nbytes

    # -- writing -----------------------------------------------------------------------------
    def add(
        self, frame: np.ndarray, action: int, reward: float, terminal: bool, episode_time: int
    ) -> None:
        slot = self.memory.cursor
        self.memory.add(frame, action, reward, terminal, episode_time)
        memory = self.memory
        sampleable = (
            memory.history_length <= slot <= memory.capacity - memory.n_step - 1
            and memory.history_valid(slot)
        )
        priority = float(self.power(self.max_priority, self.config.alpha)) if sampleable else 0.0
        self.tree.set(np.array([slot]), np.array([priority]))

    def set_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """The sampled transitions' new priorities (|delta| or the R2D2 mixture)."""
        unique, first = np.unique(indices, return_index=True)
        p = np.asarray(priorities, dtype=np.float64)[first] + self.config.eps
        self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.set(unique, self.power(p, self.config.alpha))

    # -- sampling ----------------------------------------------------------------------------
    def sampleable(self, index: int) -> bool:
        memory = self.memory
        return (
            memory.history_length <= index < memory.size - memory.n_step
            and self.tree.leaves[index] > 0
            and memory.valid(index)
        )

    def sample_indices(self, batch_size: int, rng: Stream) -> np.ndarray:
        """One stratified draw per segment of the priority mass; redrawn in its segment
        while it lands on an index not sampleable now."""
        segment = self.tree.total / batch_size
        if not segment > 0:
            raise ValueError("prioritized replay holds no transition with priority > 0")
        points = np.array([(j + rng.uniform()) * segment for j in range(batch_size)])
        indices = self.tree.find(points)
        redraws = 0
        for j in range(batch_size):
            while not self.sampleable(int(indices[j])):
                redraws += 1
                if redraws > MAX_REDRAWS:
                    raise RuntimeError("prioritized replay holds no sampleable transition")
                indices[j] = self.tree.find(np.array([(j + rng.uniform()) * segment]))[0]
        return indices

    def sample(self, batch_size: int, rng: Stream) -> dict[str, Any]:
        indices = self.sample_indices(batch_size, rng)
        batch: dict[str, Any] = self.memory.transitions(indices)
        batch["probabilities"] = self.tree.leaves[indices] / self.tree.total
        batch["population"] = len(self.memory)
        if self.config.eta > 0 and self.memory.n_step > 1:
            batch["window"] = self.window(indices, batch["lengths"])
        return batch

    def window(self, indices: np.ndarray, lengths: np.ndarray) -> dict:
        """The later transitions of each sample's n-step window, for R2D2's mixture: the
        n-step transitions starting at i+1 .. i+m-1 (same episode) whose own window is
        written and clear of the write position."""
        memory = self.memory
        n, h = memory.n_step, memory.history_length
        positions = indices[:, None] + np.arange(n)[None, :]
        valid = np.arange(n)[None, :] < lengths[:, None]
        valid[:, 0] = False  # the sample itself: its error comes from the update
        valid &= positions < memory.size - n
        touches = (positions + n - 1 >= memory.cursor) & (positions - h < memory.cursor)
        valid &= ~touches
        return {"valid": valid, "transitions": memory.n_step_transitions(positions[valid])}

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {
            "memory": self.memory.get_state(),
            "tree": self.tree.nodes.copy(),
            "max_priority": self.max_priority,
        }

    def set_state(self, state: dict) -> None:
        self.memory.set_state(state["memory"])
        nodes = np.asarray(state["tree"], dtype=np.float64)
        self.tree.set_state({"leaves": nodes[self.tree.leaf_base :][: self.memory.capacity]})
        if not np.array_equal(self.tree.nodes, nodes):
            raise ValueError("restored sum tree differs from the tree of its leaves")
        self.max_priority = float(state["max_priority"])
