"""N actors in lockstep (train.actors > 1): a different algorithm from the paper's, never
the default.

A round: every actor acts on its own state (its own exploration stream; the greedy ones
share one forward of all N states), every game takes that action, and the N transitions
are stored in actor order, each in its actor's replay memory. Steps count transitions:
the round stores transitions s .. s + N - 1, and the learner then takes the authors' step
for each of them in order, exactly as a single actor would after storing it (with t the
transition's index: once t > learning_starts epsilon anneals and an update runs when t is
a multiple of update_every; the target copy when (t + 1) % target_sync_every == 1). So
update_every 4 is still one update per 4 transitions, and the first update, epsilon and
the target copies fall on the same transition counts as with one actor; what differs is
that N transitions are gathered with the same weights and epsilon.

An actor whose episode ends starts its next at once while the others go on; an evaluation
cut (the round that begins at an evaluation point after learning starts) ends every game.
Resume points hold every actor's game, frame history, streams and counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from reprodqn.config.params import RunConfig
from reprodqn.determinism.rng import GAME_STREAMS, Streams, make_stream, torch_generator
from reprodqn.dqn.actor_replay import ActorReplay
from reprodqn.dqn.agent import make_agent
from reprodqn.dqn.replay import ReplayMemory
from reprodqn.training.atari import FrameHistory, frame_env
from reprodqn.training.games import open_games
from reprodqn.training.run_state import RunState


class LockstepRun(RunState):
    """The state of a run with N lockstep actors; the loop drives it as it drives Run."""

    replay: ActorReplay

    def __init__(self, config: RunConfig, run_dir: Path, device: torch.device, workers: int = 0):
        self.config = config
        self.dir = run_dir
        env_cfg, family = frame_env(config), config.seeds.generator
        seeds = config.seeds.model_dump()
        n = self.actors = config.train.actors
        self.streams = Streams({"minibatch": seeds["minibatch"]}, family)
        self.exploration = [make_stream(family, seeds["exploration"], k) for k in range(n)]
        self.games = open_games(
            env_cfg, {name: seeds[name] for name in GAME_STREAMS}, family, n, workers
        )
        self.n_actions = self.games.n_actions
        h, size = env_cfg.history_length, env_cfg.screen_size
        self.states = np.zeros((n, h, size, size), np.uint8)  # every actor's state, batched
        self.histories = [FrameHistory(h, size, self.states[k]) for k in range(n)]
        self.replay = ActorReplay(
            [
                ReplayMemory(
                    config.replay.capacity // n,
                    h,
                    size,
                    config.replay.episode_time_wraps,
                    config.agent.n_step,
                    config.agent.discount,
                    config.compute.numerics == "universal",
                )
                for _ in range(n)
            ]
        )
        self.agent = make_agent(
            config.agent,
            n_actions=self.n_actions,
            history_length=h,
            screen_size=size,
            device=device,
            init_generator=torch_generator(seeds["init"]),
            learning_starts=config.replay.learning_starts,
            reward_clip=env_cfg.reward_clip,
            reduction_order=config.compute.cpu_reduction_order,
            numerics=config.compute.numerics,
        )
        self.start_counters()
        self.episode_steps = [0] * n
        self.game_scores = [0] * n
        for history, frame in zip(self.histories, self.games.begin(), strict=True):
            history.reset(frame)

    @property
    def worker_pids(self) -> Sequence[int]:
        return self.games.pids

    # -- one round: N transitions --------------------------------------------------------------
    def advance(self) -> None:
        first = self.step
        actions = self.agent.act_lockstep(self.states, self.exploration)
        cut = self.evaluation_cut(first)
        for k, step in enumerate(self.games.step(actions, cut)):
            self.game_scores[k] += step.reward
            self.replay.add(
                k,
                step.frame,
                actions[k],
                self.agent.clip_reward(step.reward),
                step.terminal,
                self.episode_steps[k],
            )
            self.episode_steps[k] += 1
            if step.next_episode is None:
                self.histories[k].push(step.frame)
                continue
            self.game_scores[k] = self.episode_ended(
                self.game_scores[k], step.game_over or step.truncated or cut
            )
            self.histories[k].reset(step.next_episode)
            self.episode_steps[k] = 0
        for t in range(first, first + self.actors):
            self.learn(t)
        self.step += self.actors

    # -- exact resume: every actor's game, history, stream and counters ------------------------
    def games_state(self) -> dict:
        actors = {}
        for k, game in enumerate(self.games.get_state()):
            actors[str(k)] = {
                "game": game,
                "exploration": self.exploration[k].get_state(),
                "history": self.histories[k].get_state(),
                "episode_step": self.episode_steps[k],
                "game_score": self.game_scores[k],
            }
        return {"actors": actors}

    def set_games_state(self, state: dict) -> None:
        actors = [state["actors"][str(k)] for k in range(self.actors)]
        self.games.set_state([_plain(actor["game"]) for actor in actors])
        for k, actor in enumerate(actors):
            self.exploration[k].set_state(actor["exploration"])
            self.histories[k].set_state(actor["history"])
            self.episode_steps[k] = int(actor["episode_step"])
            self.game_scores[k] = int(actor["game_score"])

    def close(self) -> None:
        self.games.close()


def _plain(value):
    """A resume point's memory-mapped arrays as plain arrays, to cross a worker's pipe."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return np.array(value)
    return value
