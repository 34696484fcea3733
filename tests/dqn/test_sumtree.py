"""The sum tree against its definition: draws land on leaves in proportion to their values,
the tree stays the pure function of its leaves through 100K updates, and its size at 1M."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from reprodqn.dqn.sum_tree import SumTree, tree_bytes


def test_draws_follow_the_leaves_chi_square_on_100k():
    rng = np.random.default_rng(0)
    tree = SumTree(100)  # not a power of two: the padding leaves hold nothing
    values = rng.gamma(0.5, size=100)
    values[[3, 50]] = 0.0  # a zero leaf is never drawn
    tree.set(np.arange(100), values)
    draws = tree.find(rng.random(100_000) * tree.total)
    counts = np.bincount(draws, minlength=100)
    assert counts[3] == counts[50] == 0
    keep = values > 0
    expected = values[keep] / values[keep].sum() * 100_000
    result = stats.chisquare(counts[keep], expected)
    assert result.pvalue > 1e-3, result
    # and a wrong tree is caught: the same draws against swapped priorities fail
    wrong = stats.chisquare(counts[keep], np.roll(expected, 1) * 1.0)
    assert wrong.pvalue < 1e-6


def test_find_is_the_inverse_of_the_cumulative_sum():
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 0.0, 2.0, 0.5, 0.5]))
    assert tree.total == 4.0
    assert tree.find(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 3.49, 3.5, 3.99])).tolist() == [
        0,
        0,
        2,
        2,
        3,
        3,
        4,
        4,
    ]


def test_tree_equals_a_rebuild_from_its_leaves_after_100k_random_updates():
    rng = np.random.default_rng(1)
    tree = SumTree(1000)
    for _ in range(100_000 // 32):
        indices = np.unique(rng.integers(0, 1000, 32))
        tree.set(indices, rng.random(len(indices)) ** 3 * 10)
    rebuilt = SumTree(1000)
    rebuilt.set_state({"leaves": tree.leaves.copy()})
    assert np.array_equal(tree.nodes, rebuilt.nodes)  # bit for bit, every node
    assert tree.total == rebuilt.total
    assert abs(tree.total - np.sum(tree.leaves)) < 1e-9 * tree.total
    # set() recomputes parents; a delta-propagating tree would not equal its rebuild
    assert np.array_equal(
        tree.nodes[1 : tree.leaf_base],
        tree.nodes[2 : 2 * tree.leaf_base : 2] + tree.nodes[3 : 2 * tree.leaf_base : 2],
    )


def test_set_refuses_duplicate_indices_and_negative_priorities():
    tree = SumTree(8)
    with pytest.raises(ValueError, match="unique"):
        tree.set(np.array([1, 1]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=">= 0"):
        tree.set(np.array([1]), np.array([-1.0]))


def test_memory_at_one_million_is_16_mib():
    assert tree_bytes(1_000_000) == 16 * 2**20 < 20 * 10**6
    assert SumTree(1000).nbytes == tree_bytes(1000) == 2 * 1024 * 8
