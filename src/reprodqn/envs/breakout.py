"""Breakout as a Gymnasium environment, exactly as reprodqn trains on it and evaluates it:
`gymnasium.make("reprodqn/Breakout-v0", mode="train")` or mode="eval", registered when this
module is imported (or named in the id: "reprodqn.envs.breakout:reprodqn/Breakout-v0").

mode="train" is the trainer's game (training.atari.TrainingEnv): the authors' max-pool,
grayscale and resize, a 4-frame history, 1..30 no-op starts from the noop stream, a lost
life terminal for learning while the game goes on (the next reset continues it), sticky
actions from the sticky stream when sticky_p > 0, rewards raw or clipped (reward_clip).
reset(seed=s) seeds both game streams with s and starts a fresh game, as the authors'
code seeds every source with one value (123 until a seed is given).

mode="eval" is the paper's protocol (evaluation.protocol.Episode): episode k starts a
fresh game at start sequence k of the chosen file (the authors' 100 by default), or, with
sticky_p > 0, at the reset screen with sticky seed sticky_seed_start + k; the observation
is ready for the first greedy action; rewards are raw; `terminated` at game over,
`truncated` at the frame cap; a lost life relaunches the ball. reset(options={"episode":
k}) plays episode k; reset(seed=s) plays episode s (mod their number); a plain reset plays
the episode `episode_stride` after the last (so N environments of a vector env, seeded
0..N-1 and made with episode_stride=N, play every episode once between them). Episode k's result
never depends on which environment plays it, nor on what that environment played before.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from reprodqn.config.params import EnvConfig, EvaluationConfig
from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import FAMILIES, GAME_STREAMS, Streams
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import Episode, EpisodeSpec, Protocol
from reprodqn.training.atari import NOOP, Emulator, FrameHistory, TrainingEnv

ENV_ID = "reprodqn/Breakout-v0"
AUTHORS_SEED = 123  # the authors' code seeds every source with it; until reset(seed=...)
MODES = ("train", "eval")
AUTHORS_STATES = Path(__file__).resolve().parents[3] / "start_sequences" / "authors.json"
ACTION_MEANINGS = {0: "NOOP", 1: "FIRE", 2: "UP", 3: "RIGHT", 4: "LEFT", 5: "DOWN"}


class BreakoutEnv(gym.Env):
    """The game (mode="train") or the paper's evaluation protocol (mode="eval")."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        mode: str = "train",
        sticky_p: float | None = None,
        reward_clip: float | None = None,
        generator: str = "authors",
        start_sequences: str | Path | None = None,
        max_frames: int | None = None,
        sticky_seed_start: int = 0,
        episode_stride: int = 1,
        env_config: dict | None = None,
    ):
        if mode not in MODES:
            raise InputError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        if generator not in FAMILIES:
            raise InputError(f"generator {generator!r}: expected one of {', '.join(FAMILIES)}")
        if episode_stride < 1:
            raise InputError(f"episode_stride {episode_stride}: expected a positive integer")
        changes = dict(env_config or {})
        if sticky_p is not None:
            changes["sticky_p"] = sticky_p
        try:
            self.config = EnvConfig(**{**EnvConfig().model_dump(), **changes})
        except ValueError as error:  # pydantic's, one line per field
            raise InputError("env_config: " + " ".join(str(error).splitlines()[1:3])) from None
        self.mode, self.generator, self.reward_clip = mode, generator, reward_clip
        c = self.config
        self.observation_space = spaces.Box(
            0, 255, (c.history_length, c.screen_size, c.screen_size), np.uint8
        )
        self.history = FrameHistory(c.history_length, c.screen_size)
        if mode == "train":
            self._streams = Streams(dict.fromkeys(GAME_STREAMS, AUTHORS_SEED), generator)
            self._game = TrainingEnv(
                c, self._streams["sticky"] if c.sticky_p > 0 else None, self._streams["noop"]
            )
            self.action_set = self._game.emulator.action_set
        else:
            evaluation = EvaluationConfig()
            self.protocol = Protocol(
                c.game,
                c.frame_skip,
                c.history_length,
                c.screen_size,
                max_frames or evaluation.max_frames,
                c.sticky_p,
                evaluation.inference_chunk,
                c.resize,
                generator,
            )
            self.sticky_seed_start, self.episode_stride = sticky_seed_start, episode_stride
            path = Path(start_sequences) if start_sequences else AUTHORS_STATES
            self.start_sequences = path
            self.sequences = start_states.load(path)["sequences"]
            self._emulator = Emulator(c.game, 0.0, None, c.screen_size, c.resize)
            self.action_set = self._emulator.action_set
            self._episode: Episode | None = None
            self._next = 0
        self.action_space = spaces.Discrete(len(self.action_set))

    @property
    def episodes(self) -> int:
        """Eval mode: how many distinct episodes there are (the start-sequence file's)."""
        return len(self.sequences)

    def get_action_meanings(self) -> list[str]:
        return [ACTION_MEANINGS.get(a, str(a)) for a in self.action_set]

    # -- Gymnasium's API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # Gymnasium's np_random is never drawn from here
        if self.mode == "train":
            return self._reset_train(seed), self._train_info(lives_lost=False)
        return self._reset_eval(seed, options or {})

    def step(self, action):
        if not self.action_space.contains(action):
            raise InputError(
                f"action {action!r}: expected an integer in [0, {self.action_space.n})"
            )
        if self.mode == "train":
            return self._step_train(int(action))
        if self._episode is None:
            raise InputError("step() before reset(): an eval episode starts at reset")
        reward, over, capped = self._episode.step(int(action))
        return (self.history.frames.copy(), float(reward), over, capped, _eval_info(self._episode))

    # -- train mode --------------------------------------------------------------------------
    def _reset_train(self, seed: int | None) -> np.ndarray:
        if seed is not None:  # a new experiment: fresh streams, a fresh game
            self._streams.set_state(
                Streams(dict.fromkeys(GAME_STREAMS, seed), self.generator).get_state()
            )
            self._game.end_game()
            self._game.emulator.prev_action = NOOP
            self._game.episode_frames = 0
        self.history.reset(self._game.begin_episode())
        return self.history.frames.copy()

    def _step_train(self, action: int):
        frame, reward, terminal, truncated, game_over = self._game.step(action)
        lives_lost = terminal and not game_over
        self.history.push(frame)
        clipped = (
            float(np.clip(reward, -self.reward_clip, self.reward_clip))
            if self.reward_clip
            else float(reward)
        )
        info = self._train_info(lives_lost) | {"raw_reward": reward, "game_over": game_over}
        return self.history.frames.copy(), clipped, terminal, truncated, info

    def _train_info(self, lives_lost: bool) -> dict:
        return {
            "lives": self._game.lives,
            "life_lost": lives_lost,
            "episode_frames": self._game.episode_frames,
        }

    # -- eval mode ---------------------------------------------------------------------------
    def _reset_eval(self, seed: int | None, options: dict):
        unknown = set(options) - {"episode"}
        if unknown:
            raise InputError(f"reset options {sorted(unknown)}: expected only 'episode'")
        if "episode" in options:
            index = options["episode"]
        elif seed is not None:
            index = seed % self.episodes
        else:
            index = self._next
        if not isinstance(index, int | np.integer) or not 0 <= index < self.episodes:
            raise InputError(
                f"episode {index!r}: expected 0 to {self.episodes - 1} (the "
                f"{self.episodes} start sequences of {self.start_sequences})"
            )
        index = int(index)
        self._next = (index + self.episode_stride) % self.episodes
        spec = (
            EpisodeSpec(index, sticky_seed=self.sticky_seed_start + index)
            if self.protocol.sticky_p > 0
            else EpisodeSpec(index, start_sequence=index)
        )
        self._episode = Episode(self._emulator, self.history, self.protocol, spec, self.sequences)
        return self.history.frames.copy(), _eval_info(self._episode)


def _eval_info(episode: Episode) -> dict:
    spec = episode.spec
    return {
        "episode_index": spec.episode,
        "start_sequence": spec.start_sequence,
        "sticky_seed": spec.sticky_seed,
        "frames": episode.frames,
        "score": episode.score,
    }


gym.register(id=ENV_ID, entry_point="reprodqn.envs.breakout:BreakoutEnv")
