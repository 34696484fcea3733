"""The prioritized-replay learning rule: the annealed importance-sampling exponent, the
importance weights of a sampled batch, and a sampled transition's new priority from its TD
errors. Schaul et al. 2016 (proportional) and R2D2's mixture; pure numpy in float64."""

from __future__ import annotations

import numpy as np

from reprodqn.dqn.settings import PrioritySettings


def beta(config: PrioritySettings, steps_learning: int) -> float:
    """beta_start rising linearly to 1 over beta_steps agent steps after learning starts."""
    fraction = min(max(steps_learning, 0) / config.beta_steps, 1.0)
    return config.beta_start + (1.0 - config.beta_start) * fraction


def importance_weights(
    batch: dict, config: PrioritySettings, steps_learning: int, power=None
) -> np.ndarray | None:
    """w_i = (N P(i))^-beta / max_j w_j over the batch (float32), or None when weights are
    off (R2D2). N is the number of transitions held, P(i) each sample's probability.
    `power`: the replay's (numpy's, or the universal numerics' power64)."""
    if not config.importance_weights:
        return None
    b = beta(config, steps_learning)
    scaled = batch["population"] * batch["probabilities"]
    weights = scaled**-b if power is None else power(scaled, -b)
    return (weights / weights.max()).astype(np.float32)


def mixture(abs_errors: np.ndarray, eta: float) -> np.ndarray:
    """p = eta max_k |delta_k| + (1 - eta) mean_k |delta_k| per row, over the window's TD
    errors (column 0: the sampled transition's own; NaN where a window is shorter). eta = 0
    is plain |delta| of the sampled transition, as in Schaul et al."""
    if eta == 0 or abs_errors.shape[1] == 1:
        return abs_errors[:, 0].copy()
    present = ~np.isnan(abs_errors)
    filled = np.where(present, abs_errors, 0.0)
    count = present.sum(axis=1)
    mean = filled.sum(axis=1) / count
    return eta * filled.max(axis=1) + (1.0 - eta) * mean
