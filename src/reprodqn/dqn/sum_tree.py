"""A sum tree written for determinism: the sampling structure of prioritized replay.

The well-known ones are not deterministic enough for this bundle: Dopamine's samples from
Python's global `random`, PFRL's from numpy's global generator, and trees that propagate
deltas up to the root drift from the sum of their leaves in float32 (flashbax#52), so
their sums depend on the order of past updates. Here:

- nodes are float64, and every parent is recomputed as left + right from its children
  (never adjusted by a delta), so the tree is a pure function of its leaves: the same
  leaves give the same tree, whatever the history of updates;
- `set` takes unique indices (callers deduplicate), so no write order is left to numpy;
- the caller draws the targets (from a named stream); the tree only descends;
- the state saved for resume is the leaves; the inner nodes are rebuilt from them.

Layout: one array of 2P float64 (P = capacity rounded up to a power of two); node 1 is the
root, node k has children 2k and 2k+1, leaf j is node P + j. At 1M capacity P = 2^20 and
the tree takes 16 MiB (16,777,216 bytes).
"""

from __future__ import annotations

import numpy as np


def tree_bytes(capacity: int) -> int:
    """Memory of a tree over `capacity` leaves."""
    return 2 * (1 << max(capacity - 1, 1).bit_length()) * np.dtype(np.float64).itemsize


class SumTree:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.leaf_base = 1 << max(capacity - 1, 1).bit_length()  # P >= capacity
        self.depth = self.leaf_base.bit_length() - 1
        self.nodes = np.zeros(2 * self.leaf_base, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        return self.nodes.nbytes

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        return self.nodes[self.leaf_base : self.leaf_base + self.capacity]

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves (unique indices, values >= 0), then recompute their ancestors level by
        level, each parent from its two children."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(np.unique(indices)) != len(indices):
            raise ValueError("SumTree.set needs unique indices (deduplicate first)")
        values = np.asarray(values, dtype=np.float64)
        if (values < 0).any() or not np.isfinite(values).all():
            raise ValueError("priorities must be finite and >= 0")
        nodes = indices + self.leaf_base
        self.nodes[nodes] = values
        for _ in range(self.depth):
            nodes = np.unique(nodes >> 1)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def rebuild(self) -> None:
        """Every inner node from the leaves, bottom up (what set() keeps true)."""
        for level in range(self.depth - 1, -1, -1):
            first = 1 << level
            parents = np.arange(first, 2 * first)
            self.nodes[parents] = self.nodes[2 * parents] + self.nodes[2 * parents + 1]

    def find(self, targets: np.ndarray) -> np.ndarray:
        """For each target x in [0, total): the leaf j with cumsum(leaves)[j-1] <= x <
        cumsum[j], found by descending (left if x < left sum, else subtract and go right).
        Rounding can land on a zero leaf at the very end; callers treat it as a redraw."""
        x = np.asarray(targets, dtype=np.float64).copy()
        node = np.ones(len(x), dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * node
            left_sum = self.nodes[left]
            go_right = x >= left_sum
            x = np.where(go_right, x - left_sum, x)
            node = np.where(go_right, left + 1, left)
        return np.minimum(node - self.leaf_base, self.capacity - 1)

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {"leaves": self.leaves.copy()}

    def set_state(self, state: dict) -> None:
        leaves = np.asarray(state["leaves"], dtype=np.float64)
        if leaves.shape != (self.capacity,):
            raise ValueError(f"sum tree state holds {leaves.shape[0]} leaves, not {self.capacity}")
        self.nodes[:] = 0.0
        self.nodes[self.leaf_base : self.leaf_base + self.capacity] = leaves
        self.rebuild()
