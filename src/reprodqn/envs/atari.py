"""Breakout, and every other game ale-py ships, as a Gymnasium environment, exactly as
reprodqn trains on it and evaluates it: `gymnasium.make("reprodqn/Breakout-v0",
mode="train")` or mode="eval" (`reprodqn/Pong-v0` and so on, after ALE's names), registered
when reprodqn.envs is imported (`gymnasium.register_envs(reprodqn.envs)`, as with ale-py;
or named in the id: "reprodqn.envs:reprodqn/Pong-v0").

mode="train" is the trainer's game (training.atari.TrainingEnv): the authors' max-pool,
grayscale and resize, a 4-frame history, 1..30 no-op starts from the noop stream, a lost
life terminal for learning while the game goes on (the next reset continues it), sticky
actions from the sticky stream when sticky_p > 0, rewards raw or clipped (reward_clip).
reset(seed=s) seeds both game streams with s and starts a fresh game, as the authors'
code seeds every source with one value (123 until a seed is given).

mode="eval" is the paper's protocol (evaluation.protocol.Episode): episode k starts a
fresh game at start sequence k of the chosen file (by default the package's for the game:
the authors' 100 for Breakout), or, with sticky_p > 0, at the reset screen with sticky seed
sticky_seed_start + k, or, for a game with no start states (start_sequences="none"), at the
reset screen after 1..30 no-ops drawn from seed sticky_seed_start + k (not the paper's
protocol: a warning says so, once, where that is the default); the observation is ready
for the first greedy action; rewards are raw; `terminated` at game over, `truncated` at
the frame cap; a lost life relaunches the ball in a game with FIRE. reset(options={"episode":
k}) plays episode k; reset(seed=s) plays episode s (mod their number); a plain reset plays
the episode `episode_stride` after the last (so N environments of a vector env, seeded
0..N-1 and made with episode_stride=N, play every episode once between them). Episode k's result
never depends on which environment plays it, nor on what that environment played before.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
from ale_py import Action
from gymnasium import spaces
from pydantic import ValidationError

from reprodqn.config import sources
from reprodqn.config.games import display_name, rom_ids
from reprodqn.config.params import EnvConfig, EvaluationConfig
from reprodqn.core import packaged, workspace
from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import FAMILIES, GAME_STREAMS, Streams
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import Episode, Protocol, episode_specs
from reprodqn.training.atari import NOOP, Emulator, FrameHistory, TrainingEnv

ENV_ID = "reprodqn/Breakout-v0"  # the paper's game; env_id(game) names the others
AUTHORS_SEED = 123  # the authors' code seeds every source with it; until reset(seed=...)
MODES = ("train", "eval")
EMULATOR_FPS = 60  # the Atari 2600's frame rate; one env step plays frame_skip of them


class AtariEnv(gym.Env):
    """The game (mode="train") or the paper's evaluation protocol (mode="eval").

    Args:
        mode: "train" (the trainer's game) or "eval" (the protocol's episodes).
        game: any game ale-py ships, by its ROM id (the registered ids set it).
        sticky_p: sticky-action probability (default: env.sticky_p, 0).
        reward_clip: train mode: clip rewards to +-reward_clip (None: raw).
        generator: the random-stream family, "authors" or "pcg64".
        start_sequences: eval mode: a start-sequence file, or "none" (reset screen after
            no-ops); default: the package's for the game, else "none".
        max_frames: eval mode: the frame cap (default 18,000).
        sticky_seed_start: eval mode: episode k's own seed is sticky_seed_start + k.
        episode_stride: eval mode: a plain reset plays the episode this far after the last.
        env_config: any other env params (params.yaml's env section) by name.
        render_mode: "rgb_array": render() gives the emulator's screen as it is now (210 x
            160 x 3 uint8 for most games), read without touching the game, so a recorded
            run (gymnasium.wrappers.RecordVideo) keeps its chain.
        **ale_arguments: ale-py's frameskip, repeat_action_probability (sticky_p: off by
            default, where ALE v5's is 0.25) and full_action_space=False; its others are
            refused naming reprodqn's way.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}  # each env's: its frame skip

    def __init__(
        self,
        mode: str = "train",
        game: str = "breakout",
        sticky_p: float | None = None,
        reward_clip: float | None = None,
        generator: str = "authors",
        start_sequences: str | Path | None = None,
        max_frames: int | None = None,
        sticky_seed_start: int = 0,
        episode_stride: int = 1,
        env_config: dict | None = None,
        render_mode: str | None = None,
        **ale_arguments: object,
    ):
        if mode not in MODES:
            raise InputError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        if generator not in FAMILIES:
            raise InputError(f"generator {generator!r}: expected one of {', '.join(FAMILIES)}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise InputError(f"render_mode {render_mode!r}: expected 'rgb_array' or None")
        self.render_mode = render_mode
        if episode_stride < 1:
            raise InputError(f"episode_stride {episode_stride}: expected a positive integer")
        changes = {"game": game, **_from_ale(ale_arguments), **(env_config or {})}
        if sticky_p is not None:
            if changes.setdefault("sticky_p", sticky_p) != sticky_p:
                raise InputError(
                    f"sticky_p={sticky_p} and repeat_action_probability="
                    f"{changes['sticky_p']}: the same thing, given twice; pass one"
                )
        if "sticky_p" not in changes:
            _say_sticky_default(game)
        try:
            self.config = EnvConfig(**{**EnvConfig().model_dump(), **changes})
        except ValidationError as error:  # as params.yaml's are said: field, what, value
            raise InputError(sources.one_line(error, "env", {})) from None
        self.mode, self.generator, self.reward_clip = mode, generator, reward_clip
        c = self.config
        self.metadata = {**self.metadata, "render_fps": EMULATOR_FPS / c.frame_skip}
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
            self._init_eval(start_sequences, max_frames)
            self.sticky_seed_start, self.episode_stride = sticky_seed_start, episode_stride
        self.action_space = spaces.Discrete(len(self.action_set))

    def _init_eval(self, start_sequences: str | Path | None, max_frames: int | None) -> None:
        """Eval mode: the protocol, its start states (or none) and an emulator to play on."""
        c, evaluation = self.config, EvaluationConfig()
        self.protocol = Protocol(
            c.game,
            c.frame_skip,
            c.history_length,
            c.screen_size,
            max_frames or evaluation.max_frames,
            c.sticky_p,
            evaluation.inference_chunk,
            c.resize,
            self.generator,
        )
        self._noop_max: int | None = None
        self.sequences: list[list[int]]
        self.start_sequences = _start_sequences(start_sequences, c.game)
        if self.start_sequences == start_states.NONE:  # a game without start states
            self._noop_max, self.sequences = c.noop_max, [[]] * evaluation.episodes
            if start_sequences is None:  # not chosen: said, once per game and process
                _say_noop_starts(c.game, c.noop_max)
        else:
            doc = start_states.load(Path(self.start_sequences))
            start_states.check_game(doc, Path(self.start_sequences), c.game, "env")
            self.sequences = doc["sequences"]
        self._emulator = Emulator(c.game, 0.0, None, c.screen_size, c.resize)
        self.action_set = self._emulator.action_set
        self._episode: Episode | None = None
        self._next = 0

    @property
    def episodes(self) -> int:
        """Eval mode: how many distinct episodes there are (the start-sequence file's)."""
        return len(self.sequences)

    def get_action_meanings(self) -> list[str]:
        return [Action(a).name for a in self.action_set]

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

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        emulator = self._game.emulator if self.mode == "train" else self._emulator
        return emulator.ale.getScreenRGB()

    # -- train mode --------------------------------------------------------------------------
    def get_state(self) -> dict:
        """Train mode's whole state (the game, its frame history, its two streams), for an
        exact resume point (reprodqn.exact.save_resume_point takes the env itself)."""
        if self.mode != "train":
            raise InputError("get_state: train mode only (an eval episode restarts at reset)")
        return {
            "game": self._game.get_state(),
            "history": self.history.get_state(),
            "streams": self._streams.get_state(),
        }

    def set_state(self, state: dict) -> None:
        if self.mode != "train":
            raise InputError("set_state: train mode only (an eval episode restarts at reset)")
        self._game.set_state(state["game"])
        self.history.set_state(state["history"])
        self._streams.set_state(state["streams"])

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
            which = (
                "episodes of its no-op starts"
                if self._noop_max is not None
                else f"start sequences of {self.start_sequences}"
            )
            raise InputError(
                f"episode {index!r}: expected 0 to {self.episodes - 1} (the "
                f"{self.episodes} {which})"
            )
        index = int(index)
        self._next = (index + self.episode_stride) % self.episodes
        spec = episode_specs(self.protocol, index + 1, self.sticky_seed_start, self._noop_max)[
            index
        ]
        self._episode = Episode(self._emulator, self.history, self.protocol, spec, self.sequences)
        return self.history.frames.copy(), _eval_info(self._episode)


def _eval_info(episode: Episode) -> dict:
    spec = episode.spec
    return {
        "episode_index": spec.episode,
        "start_sequence": spec.start_sequence,
        "sticky_seed": spec.sticky_seed,
        "noops": spec.noops,
        "frames": episode.frames,
        "score": episode.score,
        "lives": episode.emulator.lives(),  # as train mode's info gives them
    }


_NOOP_STARTS_SAID: set[str] = set()


def _say_noop_starts(game: str, noop_max: int) -> None:
    """An eval env of a game with no start states, neither the package's nor this
    directory's, plays no-op starts: a warning, once (a vector env's N copies would say it
    N times)."""
    if game in _NOOP_STARTS_SAID:
        return
    _NOOP_STARTS_SAID.add(game)
    warnings.warn(
        f"{env_id(game)}: neither the package nor this directory has start states for "
        f"{game} ({workspace.game_start_sequences(game).as_posix()}, which `reprodqn select "
        f"--set env.game={game}` writes), so each eval episode starts at the reset screen "
        f"after 1..{noop_max} no-ops from its own seed: not the paper's protocol "
        "(start_sequences='none' chooses this without the warning)",
        stacklevel=4,
    )


# ale-py's arguments (gymnasium.make("ALE/...-v5", ...)): the same thing under reprodqn's
# name, or what reprodqn has in its place
ALE_SAME = {"frameskip": "frame_skip", "repeat_action_probability": "sticky_p"}
ALE_OTHER = {
    "full_action_space": "reprodqn plays the game's minimal action set, the paper's network's "
    "outputs (full_action_space=False, ALE v5's default, is accepted)",
    "obs_type": "the observation is the authors' history_length x screen_size x screen_size "
    "grayscale stack of max-pooled frames (env_config); render() gives the RGB screen "
    "with render_mode='rgb_array'",
}
ALE_DEFAULT_STICKY = 0.25  # ALE v5's repeat_action_probability


def _from_ale(given: dict) -> dict:
    """ale-py's arguments as env params where they mean the same thing; one line naming
    reprodqn's way otherwise (a stray name was a raw TypeError)."""
    changes = {}
    for name, value in given.items():
        if name in ALE_SAME:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(
                    f"{name}={value!r}: reprodqn takes a fixed number here "
                    f"({ALE_SAME[name]} in env params)"
                )
            changes[ALE_SAME[name]] = value
        elif name == "full_action_space" and value is False:
            continue
        elif name in ALE_OTHER:
            raise InputError(f"{name}={value!r}: not offered; {ALE_OTHER[name]}")
        else:
            raise InputError(
                f"{name}: not an argument of reprodqn's env (expected mode, game, sticky_p, "
                "reward_clip, generator, start_sequences, max_frames, sticky_seed_start, "
                "episode_stride, env_config, render_mode, or ale-py's frameskip, "
                "repeat_action_probability)"
            )
    return changes


_STICKY_SAID: set[str] = set()


def _say_sticky_default(game: str) -> None:
    """Sticky actions default to off (the paper's deterministic setting), where ALE v5's
    envs repeat an action with probability 0.25: said once per game and process."""
    if game in _STICKY_SAID:
        return
    _STICKY_SAID.add(game)
    warnings.warn(
        f"{env_id(game)}: sticky actions off (sticky_p=0, the paper's setting); ALE's "
        f"ALE/{display_name(game)}-v5 repeats an action with probability "
        f"{ALE_DEFAULT_STICKY}: pass sticky_p={ALE_DEFAULT_STICKY} for that, or sticky_p=0 "
        "to say you chose it",
        stacklevel=4,
    )


def _start_sequences(chosen: str | Path | None, game: str) -> str:
    """The start states an eval env plays: those named; by default the game's as params
    name them (the authors' for Breakout), or none for a game the package has none for;
    a name found as every command finds it (packaged.start_sequences)."""
    name = str(chosen) if chosen else packaged.game_start_sequences_name(game)
    if name is None or name == start_states.NONE:
        return start_states.NONE
    return str(packaged.start_sequences(name))


def env_id(game: str) -> str:
    """The environment's id, after ALE's names: reprodqn/Breakout-v0, reprodqn/Pong-v0, ..."""
    return f"reprodqn/{display_name(game)}-v0"


def register_all() -> None:
    """reprodqn/{Name}-v0 for every game the installed ale-py ships (reprodqn.envs does this
    when it is imported)."""
    for game in rom_ids():
        if env_id(game) not in gym.registry:
            gym.register(
                id=env_id(game), entry_point="reprodqn.envs.atari:AtariEnv", kwargs={"game": game}
            )
