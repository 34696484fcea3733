"""Random minibatches in the replay's format, for benchmarks that time updates alone.
No side effects on import (no instruction-set floor applied), so any bench may use it."""

from __future__ import annotations

import numpy as np


def random_batches(count: int, config, rng: np.random.Generator) -> list[dict]:
    batch_size = config.agent.batch_size
    shape = (batch_size, config.env.history_length, 84, 84)
    return [
        {
            "states": rng.integers(0, 256, shape, dtype=np.uint8),
            "next_states": rng.integers(0, 256, shape, dtype=np.uint8),
            "actions": rng.integers(0, 4, batch_size).astype(np.uint8),
            "rewards": rng.integers(-1, 2, batch_size).astype(np.float32),
            "terminals": rng.random(batch_size) < 0.01,
        }
        for _ in range(count)
    ]
