"""The universal numerics mode's share of DQN and Double DQN, as mixins the agent classes
put first: the greedy choice, the TD target and the loss in reprodqn.universal's
arithmetic, and torch watched (universal.guard) while an update or a greedy action runs, so
no float op slips onto torch's kernels. Uniform or prioritized replay (its powers by
rounding.power64), 1-step or n-step targets (gamma^k as running binary64 products:
replay.py); compute.check_universal says what else."""

from __future__ import annotations

import numpy as np
import torch

from reprodqn.universal import learning
from reprodqn.universal.backend import host
from reprodqn.universal.guard import UniversalOnly


class UniversalLearning:
    """DQN's acting and update in the universal mode (on a DQNAgent)."""

    online: torch.nn.Module
    target: torch.nn.Module
    device: torch.device

    @torch.inference_mode()
    def greedy_action(self, state: np.ndarray) -> int:
        frames = torch.from_numpy(state).to(self.device).unsqueeze(0)
        with UniversalOnly():
            return int(learning.greedy_actions(self.online(frames))[0])

    def next_values(self, next_states: torch.Tensor) -> np.ndarray:
        return learning.max_q(self.target(next_states))

    def update_with_td_errors(self, batch, weights=None):
        """One optimizer step on a minibatch (each sample's loss weighted by its importance
        weight under prioritized replay); the loss and the TD errors fl(t - Q(s, a)) the
        step was taken on, in the minibatch's order. The gpu group's random reduction order
        permutes the rows first, as the standard agent does."""
        batch, weights, order = self.reordered(batch, weights)
        states, next_states, actions, rewards, not_terminal, discounts = self.on_device(batch)
        config = self.config
        gamma = config.discount if discounts is None else discounts  # n-step: gamma^m
        with UniversalOnly():
            with torch.no_grad():
                next_q = self.next_values(next_states)
                targets = learning.td_target(
                    rewards, next_q, not_terminal, gamma, config.target_dtype, states.device
                )
            q_all = self.online(states)
            loss = learning.q_loss(
                q_all, actions, targets, config.loss, config.loss_reduction, weights
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        rows = np.arange(len(q_all))
        chosen = host(q_all, "Q-values")[rows, actions.cpu().numpy()]
        td_errors = host(targets, "targets") - chosen
        if order is not None:
            td_errors = td_errors[np.argsort(order)]
        return loss.detach(), torch.from_numpy(td_errors)


class UniversalDoubleLearning(UniversalLearning):
    """Double DQN's target in the universal mode: the online network's first greedy
    action, valued by the target network."""

    def next_values(self, next_states: torch.Tensor) -> np.ndarray:
        best = learning.greedy_actions(self.online(next_states))
        values = host(self.target(next_states), "Q-values")
        return values[np.arange(len(best)), best]
