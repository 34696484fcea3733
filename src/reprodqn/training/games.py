"""The N games of lockstep actors (train.actors > 1), stepped in this process or in K
worker processes (REPRODQN_ACTOR_WORKERS=K, a launch setting that never changes a result).

Game k is actor k's TrainingEnv with actor k's own no-op and sticky streams (rng's
derivation rule: actor 0 keeps the run's streams). A round sends one action per game and
gets back each game's step; a game whose episode ended, or every game at an evaluation
cut, starts its next episode at once and returns that episode's first frame too, while the
others go on. Nothing a game computes depends on the others, so the chains are the same
for any K.

Workers are processes, not threads: ale-py holds the GIL while it emulates (two emulators
on two threads ran 1.06x as fast as one after the other, bench/actors_throughput.py). Each
worker owns a contiguous block of games and serves requests on a pipe; it exits when the
pipe closes, so a killed trainer leaves no worker behind.
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass

import numpy as np

from reprodqn.determinism.rng import GAME_STREAMS, Streams
from reprodqn.training.atari import TrainingEnv


@dataclass(frozen=True)
class GameStep:
    frame: np.ndarray
    reward: int
    terminal: bool
    truncated: bool
    game_over: bool
    next_episode: np.ndarray | None  # the next episode's first frame, if this one ended


class Games:
    """A block of games (actors `first` .. `first + count - 1`) in this process."""

    def __init__(self, env_config, seeds: dict[str, int], family: str, first: int, count: int):
        self.streams = [
            Streams({name: seeds[name] for name in GAME_STREAMS}, family, actor)
            for actor in range(first, first + count)
        ]
        self.envs = [
            TrainingEnv(
                env_config, streams["sticky"] if env_config.sticky_p > 0 else None, streams["noop"]
            )
            for streams in self.streams
        ]
        self.n_actions = self.envs[0].n_actions
        self.pids: list[int] = []

    def begin(self) -> list[np.ndarray]:
        return [env.begin_episode() for env in self.envs]

    def step(self, actions: list[int], cut: bool) -> list[GameStep]:
        steps = []
        for env, action in zip(self.envs, actions, strict=True):
            frame, reward, terminal, truncated, game_over = env.step(action)
            next_episode = None
            if terminal or truncated or cut:
                if cut:  # the authors' reset_game() after an evaluation
                    env.end_game()
                next_episode = env.begin_episode()
            steps.append(GameStep(frame, reward, terminal, truncated, game_over, next_episode))
        return steps

    def get_state(self) -> list[dict]:
        return [
            {"env": env.get_state(), "streams": streams.get_state()}
            for env, streams in zip(self.envs, self.streams, strict=True)
        ]

    def set_state(self, states: list[dict]) -> None:
        for env, streams, state in zip(self.envs, self.streams, states, strict=True):
            env.set_state(state["env"])
            streams.set_state(state["streams"])

    def close(self) -> None:
        pass


def _serve(conn, env_config, seeds, family, first, count) -> None:
    """A worker: build its block of games, then answer requests until the pipe closes."""
    try:
        games = Games(env_config, seeds, family, first, count)
        conn.send(("ok", (games.n_actions, os.getpid())))  # its own word that it runs
        while True:
            command, *args = conn.recv()
            if command == "close":
                return
            conn.send(("ok", getattr(games, command)(*args)))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the trainer is gone: so is this worker
    except Exception as error:  # reported to the trainer, which raises
        conn.send(("error", f"{type(error).__name__}: {error}"))


class GameWorkers:
    """N games in K worker processes, blocks as even as they can be; the same requests as
    Games, answered in actor order."""

    def __init__(self, env_config, seeds: dict[str, int], family: str, actors: int, workers: int):
        workers = min(workers, actors)
        sizes = [actors // workers + (i < actors % workers) for i in range(workers)]
        self.blocks = [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]
        context = multiprocessing.get_context("spawn")  # never fork a process holding torch
        self.conns, self.processes = [], []
        try:
            for first, count in self.blocks:
                parent, child = context.Pipe()
                process = context.Process(
                    target=_serve,
                    daemon=True,
                    name=f"game-{first}",
                    args=(child, env_config, seeds, family, first, count),
                )
                process.start()
                child.close()  # only the worker holds its end: the pipe closes with us
                self.conns.append(parent)
                self.processes.append(process)
            greetings = self._gather([None] * len(self.conns))
        except BaseException:
            self.close()
            raise
        self.n_actions = greetings[0][0]
        self.pids = [pid for _, pid in greetings]

    def _gather(self, requests: list) -> list:
        """Send each worker its request (None: wait for its greeting), then collect."""
        for conn, request in zip(self.conns, requests, strict=True):
            if request is not None:
                conn.send(request)
        replies = []
        for (first, _), conn in zip(self.blocks, self.conns, strict=True):
            try:
                status, value = conn.recv()
            except EOFError:
                raise RuntimeError(f"game worker for actors from {first} died") from None
            if status != "ok":
                raise RuntimeError(f"game worker for actors from {first}: {value}")
            replies.append(value)
        return replies

    def _each(self, command: str, per_block: list | None = None) -> list:
        args = per_block or [() for _ in self.blocks]
        replies = self._gather([(command, *arg) for arg in args])
        return [item for reply in replies for item in reply]

    def _split(self, items: list) -> list[list]:
        return [items[first : first + count] for first, count in self.blocks]

    def begin(self) -> list[np.ndarray]:
        return self._each("begin")

    def step(self, actions: list[int], cut: bool) -> list[GameStep]:
        return self._each("step", [(block, cut) for block in self._split(actions)])

    def get_state(self) -> list[dict]:
        return self._each("get_state")

    def set_state(self, states: list[dict]) -> None:
        self._gather([("set_state", block) for block in self._split(states)])

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close",))
            except OSError:
                pass
            conn.close()
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


def open_games(
    env_config, seeds: dict[str, int], family: str, actors: int, workers: int
) -> Games | GameWorkers:
    """All N games: in this process when workers is 0, else in that many processes."""
    if workers == 0:
        return Games(env_config, seeds, family, 0, actors)
    return GameWorkers(env_config, seeds, family, actors, workers)
