"""What every training run keeps besides its games: the counters, the loss hash chain, the
process metrics since the last log line, the evaluation-cut rule and its resume points.
Run (one actor, the paper's) and LockstepRun (N actors) add the acting side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.exact import HashChain, load_resume_point, save_resume_point

if TYPE_CHECKING:  # what subclasses hold, named for the type checker only
    from reprodqn.config.params import RunConfig
    from reprodqn.determinism.rng import Streams
    from reprodqn.dqn.actor_replay import ActorReplay
    from reprodqn.dqn.agent import DQNAgent
    from reprodqn.dqn.prioritized_replay import PrioritizedReplay
    from reprodqn.dqn.replay import ReplayMemory


@dataclass
class Accumulators:
    """Process metrics gathered since the last process.jsonl line."""

    loss_sum: float = 0.0
    loss_count: int = 0
    game_scores: list = field(default_factory=list)
    episodes: int = 0


class RunState:
    """Subclasses set config, dir, streams, replay and agent, call start_counters(), and give
    the state of their games (and any counters of their own) to get_state/set_state."""

    config: RunConfig
    dir: Path
    streams: Streams
    replay: ReplayMemory | PrioritizedReplay | ActorReplay
    agent: DQNAgent
    n_actions: int

    @property
    def worker_pids(self) -> Sequence[int]:
        """Processes stepping the games besides this one."""
        return ()

    def advance(self) -> None:
        """One agent step (one actor) or one round of N transitions (lockstep actors)."""
        raise NotImplementedError

    def start_counters(self) -> None:
        self.step = 0
        self.updates = 0
        # hashes.jsonl and checkpoints/, as any script's; a universal chain says so per line
        self.chain = HashChain(self.dir, self.config.compute.numerics)
        self.pending_losses: list[torch.Tensor] = []
        self.acc = Accumulators()

    def evaluation_cut(self, step: int) -> bool:
        """The authors evaluate inside training at every evaluation point after learning
        starts, then reset the game, ending the training episode (dqn/train.py ~122-127)."""
        return (
            self.config.train.end_episode_at_evaluation
            and step > self.config.replay.learning_starts
            and step % self.config.train.checkpoint_every == 0
        )

    def flush_losses(self) -> None:
        """Fold pending losses into the chain (batched so CUDA syncs once per flush)."""
        if self.pending_losses:
            losses = torch.stack(self.pending_losses).cpu().numpy()
            self.pending_losses.clear()
            self.chain.extend(losses)
            self.acc.loss_sum += float(losses.astype(np.float64).sum())
            self.acc.loss_count += len(losses)

    def learn(self, t: int) -> None:
        """The authors' learning step after transition t: an update when it is due."""
        loss = self.agent.learn(t, self.replay, self.streams["minibatch"])
        if loss is not None:
            self.pending_losses.append(loss)
            self.updates += 1

    def episode_ended(self, score: int, game_ended: bool) -> int:
        """Count an ended training episode; a game that ended (not only a life) adds its
        score to the process metrics. Returns the game's score to carry on with."""
        self.acc.episodes += 1
        if not game_ended:
            return score
        self.acc.game_scores.append(score)
        return 0

    # -- exact resume: the parts' states, composed -------------------------------------------
    def get_state(self) -> dict:
        self.flush_losses()
        counters = {
            "step": self.step,
            "updates": self.updates,
            "loss_chain": self.loss_chain,
            **self.own_counters(),
            "accumulators": self.acc.__dict__,
        }
        return {
            "config_digest": self.config.digest(),
            "experiment_digest": self.config.experiment_digest(),
            "run": counters,
            "streams": self.streams.get_state(),
            **self.games_state(),
            "replay": self.replay.get_state(),
            "agent": self.agent.get_state(),
        }

    def set_state(self, state: dict) -> None:
        counters = state["run"]
        self.step = int(counters["step"])
        self.updates = int(counters["updates"])
        self.chain.loss_chain = counters["loss_chain"]
        self.chain.updates = self.updates
        self.set_own_counters(counters)
        self.acc = Accumulators(**counters["accumulators"])
        self.streams.set_state(state["streams"])
        self.set_games_state(state)
        self.replay.set_state(state["replay"])
        self.agent.set_state(state["agent"])

    def own_counters(self) -> dict:
        return {}

    def set_own_counters(self, counters: dict) -> None:
        pass

    def games_state(self) -> dict:
        raise NotImplementedError

    def set_games_state(self, state: dict) -> None:
        raise NotImplementedError

    @property
    def loss_chain(self) -> str:
        return self.chain.loss_chain

    def save_resume_point(self, log_offsets: dict[str, int]) -> None:
        save_resume_point(
            self.dir,
            self.step,
            {**self.get_state(), "log_offsets": log_offsets},
        )

    def load_resume_point(self) -> dict[str, int] | None:
        """Restore from the latest resume point; returns its log offsets, or None."""
        state = load_resume_point(self.dir, {}, str(self.agent.device))
        if state is None:
            return None
        if state["config_digest"] != self.config.digest():
            raise InputError(
                f"{workspace.resume_dir(self.dir)}: resume point was written with different params"
            )
        self.set_state(state)
        return state["log_offsets"]

    def close(self) -> None:
        """Release what the run holds besides memory (a lockstep run's game workers)."""
