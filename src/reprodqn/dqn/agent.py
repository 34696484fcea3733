"""The DQN agent: epsilon-greedy acting from the exploration stream, the Q-learning update
(Huber loss against a target network), and the target copy; Double DQN as a one-method
override, and the prioritized-replay learning rule (importance weights, new priorities)
through `priority_rule` when replay is prioritized."""

from __future__ import annotations

import copy
import secrets
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn import functional as F

from reprodqn.determinism.provenance import row_order_drawn
from reprodqn.determinism.rng import Stream
from reprodqn.dqn import priority_rule
from reprodqn.dqn.network import build_q_network, q_values
from reprodqn.dqn.optimizers import build_optimizer
from reprodqn.dqn.settings import AgentSettings, PrioritySettings
from reprodqn.dqn.universal_agent import UniversalDoubleLearning, UniversalLearning

if TYPE_CHECKING:
    from reprodqn.dqn.cuda_graphs import CudaGraphs

# a minibatch's per-row arrays: what a reordering of its rows permutes
ROW_KEYS = ("states", "next_states", "actions", "rewards", "terminals", "discounts")


def os_entropy_order(n: int) -> np.ndarray:
    """A permutation of n rows drawn from the operating system's entropy: never from a seeded
    stream, so no two runs (or resumes) draw the same sequence, as no two launches of a
    nondeterministic GPU kernel add in the same order."""
    order = list(range(n))
    secrets.SystemRandom().shuffle(order)
    return np.array(order)


class AnnealedEpsilon:
    """The exploration rate as the authors' loop keeps it (dqn/train.py ~118-121): start at
    epsilon_start; after each step taken once the step count exceeds learning_starts,
    subtract (start - final) / decay_steps, never going below epsilon_final. Kept as a
    running value, as theirs, so each step's epsilon has their float64 rounding."""

    def __init__(self, agent_config: AgentSettings):
        self.final = agent_config.epsilon_final
        self.delta = (agent_config.epsilon_start - self.final) / agent_config.epsilon_decay_steps
        self.value = agent_config.epsilon_start

    def anneal(self) -> None:
        self.value = max(self.value - self.delta, self.final)


class DQNAgent:
    """DQN (Mnih et al. 2015) as the authors ran it: epsilon-greedy acting, one RMSprop
    update on a uniform minibatch every `update_every` steps once learning has started,
    Huber loss against a target network copied every `target_sync_every` steps, rewards
    clipped for learning. A variant overrides `td_target` (Double DQN) or swaps a part.

    Timing is the authors' (dqn/train.py ~118-137), with t the index of the step just
    taken: once t > learning_starts, epsilon anneals and an update runs when t is a
    multiple of update_every (first after 50,005 stored transitions; 49,999 updates by step
    250K); the target copy follows when (t + 1) % target_sync_every == 1, and once at
    construction."""

    def __init__(
        self,
        agent_config: AgentSettings,
        *,
        n_actions: int,
        history_length: int,
        screen_size: int,
        device: torch.device,
        init_generator: torch.Generator,
        learning_starts: int,
        reward_clip: float,
        priority_config: PrioritySettings | None = None,
        reduction_order: str = "fixed",
        numerics: str = "standard",
    ):
        self.config = agent_config
        self.numerics = numerics
        self.shuffle_rows = row_order_drawn(reduction_order, device.type, numerics)
        self.priority = priority_config  # None: uniform replay, the authors' rule
        self.n_actions = n_actions
        self.device = device
        self.learning_starts = learning_starts
        self.reward_clip = reward_clip
        self.epsilon = AnnealedEpsilon(agent_config)
        self.online = build_q_network(
            agent_config.network,
            n_actions,
            history_length,
            screen_size,
            init_generator,
            agent_config.dueling,
            numerics,
        ).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.optimizer = build_optimizer(self.online.parameters(), agent_config, numerics)
        # compute.cuda_graphs: the update and the greedy action replayed as CUDA graphs
        self.graphs: CudaGraphs | None = None

    # -- acting ------------------------------------------------------------------------------
    def act(self, state: np.ndarray, rng: Stream) -> int:
        """One uniform draw decides; a second picks the random action (the authors' order,
        dqn/dqn.py eGreedy_action)."""
        if rng.uniform() < self.epsilon.value:
            return rng.integer(0, self.n_actions)
        return self.greedy_action(state)

    def act_lockstep(self, states: np.ndarray, rngs: list) -> list[int]:
        """One action per lockstep actor, each decided by its own stream's draws as in act();
        the greedy ones share one forward of all N states (always that batch, so an action
        never depends on which other actors explore)."""
        actions, greedy = [], []
        for actor, rng in enumerate(rngs):
            if rng.uniform() < self.epsilon.value:
                actions.append(rng.integer(0, self.n_actions))
            else:
                actions.append(-1)
                greedy.append(actor)
        if greedy:
            best = q_values(self.online, states, len(states)).argmax(axis=1)
            for actor in greedy:
                actions[actor] = int(best[actor])
        return actions

    @torch.inference_mode()
    def greedy_action(self, state: np.ndarray) -> int:
        if self.graphs is not None:
            return self.graphs.act(state)
        frames = torch.from_numpy(state).to(self.device).unsqueeze(0)
        return int(self.online(frames).argmax(dim=1).item())

    # -- learning ----------------------------------------------------------------------------
    def clip_reward(self, reward: float) -> float:
        """The 4 frames' reward sum, clipped for learning (scores stay raw)."""
        return min(max(reward, -self.reward_clip), self.reward_clip)

    def learn(self, step: int, replay, rng: Stream) -> torch.Tensor | None:
        """After the transition of agent step `step` (from 0) is stored: anneal epsilon and
        update when the cadence says so (the loss is returned), then the target copy."""
        loss = None
        if step > self.learning_starts:
            self.epsilon.anneal()
            if step % self.config.update_every == 0:
                if self.graphs is not None:  # the same draws as sample()'s
                    loss = self.graphs.update(replay.sample_indices(self.config.batch_size, rng))
                else:
                    batch = replay.sample(self.config.batch_size, rng)
                    loss = (
                        self.update(batch)
                        if self.priority is None
                        else self.update_prioritized(step, batch, replay, self.priority)
                    )
        sync = self.config.target_sync_every
        if (step + 1) % sync == 1 % sync:
            self.sync_target()
        return loss

    def next_values(self, next_states: torch.Tensor) -> torch.Tensor:
        """max_a Q_target(s', a): the target network both picks and values the action."""
        return self.target(next_states).max(dim=1).values

    def td_target(
        self,
        rewards: torch.Tensor,
        next_states: torch.Tensor,
        not_terminal: torch.Tensor,
        discounts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """r + gamma * V(s'), zero bootstrap at terminals; with n-step returns, r is the
        n-step return (float64) and `discounts` holds gamma^m per sample."""
        next_q = self.next_values(next_states)
        gamma = self.config.discount if discounts is None else discounts
        if self.config.target_dtype == "float64":  # the authors': per sample, in float64
            target = rewards.double() + gamma * next_q.double() * not_terminal
            return target.float()
        if discounts is not None:
            rewards, gamma = rewards.float(), discounts.float()
        return rewards + gamma * next_q * not_terminal

    def targets_and_q(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The TD targets (no gradient) and Q(s, a) of a minibatch."""
        states, next_states, actions, rewards, not_terminal, discounts = self.on_device(batch)
        with torch.no_grad():
            targets = self.td_target(rewards, next_states, not_terminal, discounts)
        q = self.online(states).gather(1, actions.unsqueeze(1)).squeeze(1)
        return targets, q

    def on_device(self, batch: dict) -> tuple:
        """A minibatch's states, next states, actions, rewards, not-terminal flags and
        discounts (None at n = 1) on the device: host arrays copied there, or the device
        replay's tensors as they are (compute.replay_on_device)."""
        if isinstance(batch["states"], torch.Tensor):
            return (
                batch["states"],
                batch["next_states"],
                batch["actions"],
                batch["rewards"],
                ~batch["terminals"],
                None,
            )
        device = self.device
        states = torch.from_numpy(batch["states"]).to(device)
        next_states = torch.from_numpy(batch["next_states"]).to(device)
        actions = torch.from_numpy(batch["actions"].astype(np.int64)).to(device)
        rewards = torch.from_numpy(batch["rewards"]).to(device)
        not_terminal = torch.from_numpy(~batch["terminals"]).to(device)
        discounts = (
            torch.from_numpy(batch["discounts"]).to(device)
            if batch.get("discounts") is not None
            else None
        )
        return states, next_states, actions, rewards, not_terminal, discounts

    def loss(
        self, q: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Huber (the authors'; its gradient is DeepMind's TD error clipped to +-1) or
        squared error, reduced over the batch by mean (the authors') or sum (DeepMind's
        summed gradient); with importance weights, of the weighted per-sample losses."""
        per_sample = F.smooth_l1_loss if self.config.loss == "huber" else F.mse_loss
        reduction = self.config.loss_reduction
        if weights is None:
            return per_sample(q, targets, reduction=reduction)
        weighted = weights * per_sample(q, targets, reduction="none")
        return weighted.mean() if reduction == "mean" else weighted.sum()

    def update(
        self, batch: dict[str, np.ndarray], weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One optimizer step on a minibatch; returns the loss (a 0-d tensor on the device)."""
        return self.update_with_td_errors(batch, weights)[0]

    def update_with_td_errors(
        self, batch: dict[str, np.ndarray], weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step; the loss and the TD errors the step was taken on (in the
        minibatch's order, whatever order the update summed its rows in)."""
        batch, weights, order = self.reordered(batch, weights)
        targets, q = self.targets_and_q(batch)
        loss = self.loss(q, targets, weights)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        td_errors = (targets - q).detach()
        if order is not None:
            td_errors = td_errors[torch.from_numpy(np.argsort(order))]
        return loss.detach(), td_errors

    def reordered(self, batch: dict, weights: torch.Tensor | None):
        """The minibatch (and its weights) in an order drawn from OS entropy where the
        reduction order is random, else as it is; and that order (None: as it is)."""
        if not self.shuffle_rows:
            return batch, weights, None
        order = os_entropy_order(len(batch["actions"]))  # the same terms, summed otherwise
        batch = {**batch, **{k: batch[k][order] for k in ROW_KEYS if k in batch}}
        return batch, None if weights is None else weights[torch.from_numpy(order)], order

    def update_prioritized(
        self, step: int, batch: dict, replay, priority: PrioritySettings
    ) -> torch.Tensor:
        """The update with importance weights (unless off), then the sampled transitions'
        new priorities from their TD errors before the step (Schaul et al. 2016)."""
        importance = priority_rule.importance_weights(
            batch, priority, step - self.learning_starts, getattr(replay, "power", None)
        )
        weights = torch.from_numpy(importance).to(self.device) if importance is not None else None
        errors = np.abs(self.window_td_errors(batch, priority.eta))  # before the update
        loss, td_errors = self.update_with_td_errors(batch, weights)
        errors[:, 0] = np.abs(td_errors.cpu().numpy().astype(np.float64))
        replay.set_priorities(batch["indices"], priority_rule.mixture(errors, priority.eta))
        return loss

    def window_td_errors(self, batch: dict, eta: float) -> np.ndarray:
        """TD errors over each sample's n-step window (R2D2's priority mixture): column k
        is the n-step TD error of the transition k steps later in the same episode, NaN
        where there is none; column 0 is filled from the update itself."""
        positions = batch.get("window")
        errors = np.full(
            (len(batch["indices"]), 1 if positions is None else positions["valid"].shape[1]), np.nan
        )
        if positions is None or eta == 0:
            return errors
        later = positions["transitions"]
        if len(later["indices"]):
            with torch.no_grad():
                targets, q = self.targets_and_q(later)
            errors[positions["valid"]] = (targets - q).cpu().numpy().astype(np.float64)
        return errors

    def sync_target(self) -> None:
        self.target.load_state_dict(self.online.state_dict())  # in place: graphs keep it

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {"epsilon": self.epsilon.value, "tensors": self.tensors()}

    def set_state(self, state: dict) -> None:
        self.epsilon.value = float(state["epsilon"])
        self.load_tensors(state["tensors"])
        if self.graphs is not None:  # new optimizer tensors: captured again at next use
            self.graphs.release()

    def tensors(self) -> dict[str, torch.Tensor]:
        """Weights, target weights and optimizer state, as CPU tensors."""
        tensors = {f"online.{k}": v for k, v in self.online.state_dict().items()}
        tensors.update({f"target.{k}": v for k, v in self.target.state_dict().items()})
        for index, slot in self.optimizer.state_dict()["state"].items():
            for key, value in slot.items():
                tensors[f"optimizer.{index}.{key}"] = value
        return {k: v.detach().cpu().clone() for k, v in tensors.items()}

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        def section(prefix):
            return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

        self.online.load_state_dict(section("online."))
        self.target.load_state_dict(section("target."))
        slots: dict[int, dict] = {}
        for key, value in section("optimizer.").items():
            index, name = key.split(".", 1)
            slots.setdefault(int(index), {})[name] = value
        optimizer_state = self.optimizer.state_dict()
        optimizer_state["state"] = slots
        self.optimizer.load_state_dict(optimizer_state)


class DoubleDQNAgent(DQNAgent):
    """Double DQN (van Hasselt et al. 2016): the online network picks argmax_a Q(s', a),
    the target network gives its value; everything else is DQN's."""

    def next_values(self, next_states: torch.Tensor) -> torch.Tensor:
        best = self.online(next_states).argmax(dim=1, keepdim=True)
        return self.target(next_states).gather(1, best).squeeze(1)


class UniversalDQN(UniversalLearning, DQNAgent):  # type: ignore[misc]
    """DQN in the universal numerics mode."""


class UniversalDoubleDQN(UniversalDoubleLearning, DoubleDQNAgent):  # type: ignore[misc]
    """Double DQN in the universal numerics mode."""


def make_agent(
    agent_config: AgentSettings,
    *,
    n_actions: int,
    history_length: int,
    screen_size: int,
    device: torch.device,
    init_generator: torch.Generator,
    learning_starts: int,
    reward_clip: float,
    priority_config: PrioritySettings | None = None,
    reduction_order: str = "fixed",
    numerics: str = "standard",
) -> DQNAgent:
    """The agent a config names: DQN, or Double DQN when agent.double; in the universal
    numerics mode, their universal twins."""
    if numerics == "universal":
        kind: type[DQNAgent] = UniversalDoubleDQN if agent_config.double else UniversalDQN
    else:
        kind = DoubleDQNAgent if agent_config.double else DQNAgent
    return kind(
        agent_config,
        n_actions=n_actions,
        history_length=history_length,
        screen_size=screen_size,
        device=device,
        init_generator=init_generator,
        learning_starts=learning_starts,
        reward_clip=reward_clip,
        priority_config=priority_config,
        reduction_order=reduction_order,
        numerics=numerics,
    )
