"""What every training run keeps besides its games: the counters, the loss hash chain, the
process metrics since the last log line, the evaluation-cut rule and its resume points.
Run (one actor, the paper's) and LockstepRun (N actors) add the acting side."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

import numpy as np
import torch

from reprodqn.core.errors import InputError
from reprodqn.training import resume

EMPTY_CHAIN = "0" * 64


def chain_losses(chain: str, losses: np.ndarray) -> str:
    """Extend the loss hash chain: h_k = SHA-256(h_{k-1} || float32 loss_k)."""
    state = bytes.fromhex(chain)
    for value in losses.astype(np.float32, copy=False):
        state = hashlib.sha256(state + struct.pack("<f", value)).digest()
    return state.hex()


@dataclass
class Accumulators:
    """Process metrics gathered since the last process.jsonl line."""

    loss_sum: float = 0.0
    loss_count: int = 0
    game_scores: list = field(default_factory=list)
    episodes: int = 0


class RunState:
    """Subclasses set config, dir and agent, call start_counters(), and give
    get_state/set_state of the whole run."""

    worker_pids: tuple[int, ...] = ()  # processes stepping the games besides this one

    def start_counters(self) -> None:
        self.step = 0
        self.updates = 0
        self.loss_chain = EMPTY_CHAIN
        self.pending_losses: list[torch.Tensor] = []
        self.acc = Accumulators()

    def evaluation_cut(self, step: int) -> bool:
        """The authors evaluate inside training at every evaluation point after learning
        starts, then reset the game, ending the training episode (dqn/train.py ~122-127)."""
        return (self.config.train.end_episode_at_evaluation
                and step > self.config.replay.learning_starts
                and step % self.config.train.checkpoint_every == 0)

    def flush_losses(self) -> None:
        """Fold pending losses into the chain (batched so CUDA syncs once per flush)."""
        if self.pending_losses:
            losses = torch.stack(self.pending_losses).cpu().numpy()
            self.pending_losses.clear()
            self.loss_chain = chain_losses(self.loss_chain, losses)
            self.acc.loss_sum += float(losses.astype(np.float64).sum())
            self.acc.loss_count += len(losses)

    def get_state(self) -> dict:
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        raise NotImplementedError

    def save_resume_point(self, log_offsets: dict[str, int]) -> None:
        resume.save(self.dir / "resume", self.step, {**self.get_state(),
                                                     "log_offsets": log_offsets})

    def load_resume_point(self) -> dict[str, int] | None:
        """Restore from the latest resume point; returns its log offsets, or None."""
        point = resume.load(self.dir / "resume", self.agent.device)
        if point is None:
            return None
        if point.state["config_digest"] != self.config.digest():
            raise InputError(f"{point.path}: resume point was written with different params")
        self.set_state(point.state)
        return point.state["log_offsets"]

    def close(self) -> None:
        """Release what the run holds besides memory (a lockstep run's game workers)."""
