"""DQN and Double DQN in the universal numerics mode: the same learning rule, with the
greedy choice, the TD target and the loss in reprodqn.universal's arithmetic, and torch
watched (universal.guard) while an update or a greedy action runs, so that no float op
slips onto torch's kernels. Uniform replay and 1-step targets (compute.check_universal)."""

from __future__ import annotations

import numpy as np
import torch

from reprodqn.dqn.agent import ROW_KEYS, DoubleDQNAgent, DQNAgent, os_entropy_order
from reprodqn.universal import learning
from reprodqn.universal.guard import UniversalOnly


class UniversalDQN(DQNAgent):
    @torch.inference_mode()
    def greedy_action(self, state: np.ndarray) -> int:
        frames = torch.from_numpy(state).unsqueeze(0)
        with UniversalOnly():
            return int(learning.greedy_actions(self.online(frames))[0])

    def next_values(self, next_states: torch.Tensor) -> np.ndarray:  # type: ignore[override]
        return learning.max_q(self.target(next_states))

    def update_with_td_errors(self, batch, weights=None):
        """One optimizer step on a uniform minibatch; the loss (the TD errors are the
        prioritized rule's, which this mode refuses). The gpu group's random reduction
        order permutes the rows first, as the standard agent does."""
        if self.shuffle_rows:
            order = os_entropy_order(len(batch["actions"]))
            batch = {**batch, **{k: batch[k][order] for k in ROW_KEYS if k in batch}}
        states, next_states, actions, rewards, not_terminal, _ = self.on_device(batch)
        with UniversalOnly():
            with torch.no_grad():
                targets = learning.td_target(
                    rewards,
                    self.next_values(next_states),
                    not_terminal,
                    self.config.discount,
                    self.config.target_dtype,
                )
            loss = learning.q_loss(
                self.online(states),
                actions,
                targets,
                self.config.loss,
                self.config.loss_reduction,
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        return loss.detach(), torch.empty(0)


class UniversalDoubleDQN(UniversalDQN, DoubleDQNAgent):
    def next_values(self, next_states: torch.Tensor) -> np.ndarray:  # type: ignore[override]
        best = learning.greedy_actions(self.online(next_states))
        values = self.target(next_states).numpy()
        return values[np.arange(len(best)), best]


def twin(kind: type[DQNAgent]) -> type[DQNAgent]:
    """The universal twin of an agent class."""
    return UniversalDoubleDQN if issubclass(kind, DoubleDQNAgent) else UniversalDQN
