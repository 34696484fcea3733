"""Breakout through ale-py, stepped one emulator frame at a time as in the authors' code.

Written on ale-py's ALEInterface rather than gymnasium's AtariPreprocessing or ale-py's
vector env: those grayscale before max-pooling, resize with INTER_AREA, draw no-ops and
sticky actions from their own generators, and cannot replay a start sequence frame by frame
or relaunch the ball after a life loss. The paper's protocol needs all of that.

Preprocessing (the authors' code): max over the last two RGB screens -> grayscale -> 84x84
bilinear, with OpenCV's INTER_LINEAR as theirs (env.resize) or INTER_LINEAR_EXACT.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import cv2
import numpy as np
from ale_py import ALEInterface, ALEState, LoggerMode, roms

from reprodqn.core.errors import InputError
from reprodqn.training import linear_resize

NOOP, FIRE = 0, 1

cv2.setNumThreads(1)  # 84x84 frames gain nothing from threads; keep OpenCV off other cores
# 8-bit INTER_LINEAR is an integer formula built at the SSE2 baseline (same bytes at every
# dispatch level, measured); only IPP's not-exact mode would replace it, so it stays off
cv2.ipp.setUseIPP_NotExact(False)
ALEInterface.setLoggerMode(LoggerMode.Error)


RESIZE = {"linear": cv2.INTER_LINEAR, "linear_exact": cv2.INTER_LINEAR_EXACT}
INTEGER_LINEAR = "linear_integer"  # env.resize linear as the universal mode computes it


def preprocess(screens: np.ndarray, size: int, resize: str = "linear") -> np.ndarray:
    """Two RGB screens (2, 210, 160, 3) -> one (size, size) uint8 frame."""
    pooled = np.maximum(screens[0], screens[1])
    gray = cv2.cvtColor(pooled, cv2.COLOR_RGB2GRAY)
    if resize == INTEGER_LINEAR:
        return linear_resize.resize(gray, size)
    return cv2.resize(gray, (size, size), interpolation=RESIZE[resize])


def frame_resize(config) -> str:
    """The resize a run's frames get. In the universal mode the authors' INTER_LINEAR is
    reprodqn's, in integers (training/linear_resize.py): OpenCV's bytes on x86-64, and
    the same bytes on every other machine."""
    if config.env.resize == "linear" and config.compute.numerics == "universal":
        return INTEGER_LINEAR
    return config.env.resize


def frame_env(config):
    """The run's env section with the resize its frames get (frame_resize)."""
    return config.env.model_copy(update={"resize": frame_resize(config)})


@cache
def minimal_action_set(game: str) -> tuple[int, ...]:
    """The game's minimal action set, as ALE ids in ALE's order (the network's outputs)."""
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.loadROM(rom_path(game))
    return tuple(int(a.value) for a in ale.getMinimalActionSet())


def rom_path(game: str) -> Path:
    """The game's ROM as ale-py ships it."""
    path = roms.get_rom_path(game)
    if path is None:
        raise InputError(f"game {game!r}: the installed ale-py ships no ROM for it")
    return Path(path)


class Emulator:
    """One Atari game. Sticky actions are drawn per frame from the sticky stream (ALE's own
    sticky actions and its seed are switched off so no hidden generator is involved). As
    in the authors' wrapper, the previous action survives reset_game unless told not to;
    unlike ALE's reset_game, every reset is a fresh game (docs/fidelity.md)."""

    def __init__(
        self,
        game: str,
        sticky_p: float,
        sticky_rng,
        screen_size: int,
        resize: str = "linear",
        sticky_survives_reset: bool = False,
    ):
        if sticky_p > 0 and sticky_rng is None:
            raise ValueError("sticky actions need a sticky stream")
        self.ale = ALEInterface()
        self.ale.setInt("random_seed", 0)  # fixed: never ALE's time seed; its RNG is unused
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.setInt("frame_skip", 1)
        self.ale.setInt("max_num_frames_per_episode", 0)
        self.ale.loadROM(rom_path(game))
        # ALE's reset_game keeps part of the last game (RAM the ROM does not clear, and
        # more): in 30 of ale-py 0.12's 104 games the next game would depend on what was
        # played before. Every reset starts from this state, as a just-loaded emulator's.
        self._loaded = self.ale.cloneState(include_rng=True)
        self.action_set = tuple(int(a.value) for a in self.ale.getMinimalActionSet())
        self.sticky_p = sticky_p
        self.sticky_rng = sticky_rng
        self.screen_size = screen_size
        self.resize = resize
        self.sticky_survives_reset = sticky_survives_reset
        self.prev_action = NOOP
        height, width = self.ale.getScreenDims()  # 210 x 160, or 250 rows in a few games
        self._screens = np.zeros((2, height, width, 3), dtype=np.uint8)
        self._slot = 0

    # -- one emulator frame ------------------------------------------------------------------
    def act(self, ale_action: int) -> int:
        """Play one frame; with probability sticky_p the previous action is repeated."""
        if self.sticky_p > 0 and self.sticky_rng.uniform() < self.sticky_p:
            ale_action = self.prev_action
        self.prev_action = ale_action
        return self.ale.act(ale_action)

    def capture(self) -> None:
        """Keep the current screen; the next observe() max-pools the last two kept."""
        self.ale.getScreenRGB(self._screens[self._slot])
        self._slot ^= 1

    def observe(self) -> np.ndarray:
        return preprocess(self._screens, self.screen_size, self.resize)

    # -- one agent step ----------------------------------------------------------------------
    def repeat(self, ale_action: int, frames: int) -> int:
        """Play `frames` frames of one action, keep the last two screens; the raw reward sum."""
        if self.sticky_p > 0 or frames < 2:
            reward = 0
            for i in range(frames):
                reward += self.act(ale_action)
                if i >= frames - 2:
                    self.capture()
            return reward
        act = self.ale.act  # the hot path of training and evaluation: no sticky draws
        reward = 0
        for _ in range(frames - 2):
            reward += act(ale_action)
        reward += act(ale_action)
        self.capture()
        reward += act(ale_action)
        self.capture()
        self.prev_action = ale_action
        return reward

    @property
    def relaunches(self) -> bool:
        """Whether a life loss in evaluation is followed by the sweep below: in a game with
        FIRE, which is what the sweep is for (a game without FIRE goes on by itself)."""
        return FIRE in self.action_set

    def relaunch(self) -> None:
        """After a life loss in evaluation: each minimal action once, rewards not counted
        (the authors' action sweep, so FIRE relaunches the ball)."""
        for action in self.action_set:
            self.act(action)
            self.capture()

    def reset_game(self) -> None:
        """A new game, the same as a fresh emulator's first reset whatever was played."""
        self.ale.restoreState(self._loaded)
        self.ale.reset_game()
        if not self.sticky_survives_reset:
            self.prev_action = NOOP

    def lives(self) -> int:
        return self.ale.lives()

    def game_over(self) -> bool:
        return self.ale.game_over()

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {
            "ale": self.ale.cloneState(include_rng=True).serialize(),
            "prev_action": self.prev_action,
            "screens": self._screens.copy(),
            "slot": self._slot,
        }

    def set_state(self, state: dict) -> None:
        self.ale.restoreState(ALEState(state["ale"]))
        self.prev_action = int(state["prev_action"])
        self._screens[...] = state["screens"]
        self._slot = int(state["slot"])


def play_noops(emu: Emulator, noops: int) -> None:
    """An episode's opening no-op frames, each screen kept (the authors' training start)."""
    for _ in range(noops):
        emu.act(NOOP)
        emu.capture()
    if noops == 1:  # the authors' code needs two screens to max-pool
        emu.act(NOOP)
        emu.capture()
    elif noops == 0:
        emu.capture()
        emu.capture()


class TrainingEnv:
    """The training side of the protocol: episodes start with no-ops from the noop stream,
    a life loss ends the episode (the game goes on), long episodes are truncated."""

    def __init__(self, env_config, sticky_rng, noop_rng):
        self.config = env_config
        self.emulator = Emulator(
            env_config.game,
            env_config.sticky_p,
            sticky_rng,
            env_config.screen_size,
            env_config.resize,
            env_config.sticky_survives_reset,
        )
        self.noop_rng = noop_rng
        self.n_actions = len(self.emulator.action_set)
        self.lives = 0
        self.episode_frames = 0

    def begin_episode(self) -> np.ndarray:
        """Start a training episode (a new game if the last one is over); its first frame."""
        emu = self.emulator
        if emu.game_over() or self.episode_frames >= self.config.max_episode_frames:
            emu.reset_game()
        noop_max = self.config.noop_max
        play_noops(emu, self.noop_rng.integer(1, noop_max + 1) if noop_max > 0 else 0)
        self.lives = emu.lives()
        self.episode_frames = 0
        return emu.observe()

    def end_game(self) -> None:
        """End the game now (the authors' reset_game() after an evaluation)."""
        self.emulator.reset_game()

    def step(self, action_index: int) -> tuple[np.ndarray, int, bool, bool, bool]:
        """One agent step: (frame, raw reward, terminal, truncated, game over)."""
        emu = self.emulator
        skip = self.config.frame_skip
        reward = emu.repeat(emu.action_set[action_index], skip)
        self.episode_frames += skip
        game_over = emu.game_over()
        lives = emu.lives()
        life_lost = lives < self.lives
        self.lives = lives
        terminal = game_over or (life_lost and self.config.life_loss_ends_episode)
        truncated = not terminal and self.episode_frames >= self.config.max_episode_frames
        return emu.observe(), reward, terminal, truncated, game_over

    def get_state(self) -> dict:
        return {
            "emulator": self.emulator.get_state(),
            "lives": self.lives,
            "episode_frames": self.episode_frames,
        }

    def set_state(self, state: dict) -> None:
        self.emulator.set_state(state["emulator"])
        self.lives = int(state["lives"])
        self.episode_frames = int(state["episode_frames"])


class FrameHistory:
    """The last `length` frames of the current episode, zeros before its first frame
    (as the authors' State, and as replay rebuilds stacks). `frames` may be a view into a
    larger array, so evaluation can keep every episode's history in one batch."""

    def __init__(self, length: int, size: int, frames: np.ndarray | None = None):
        self.frames = np.zeros((length, size, size), np.uint8) if frames is None else frames

    def clear(self) -> None:
        self.frames[...] = 0

    def reset(self, first_frame: np.ndarray) -> None:
        self.frames[:-1] = 0
        self.frames[-1] = first_frame

    def push(self, frame: np.ndarray) -> None:
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = frame

    def get_state(self) -> dict:
        return {"frames": self.frames.copy()}

    def set_state(self, state: dict) -> None:
        self.frames[...] = state["frames"]


def replay_start_sequence(
    emulator: Emulator, history: FrameHistory, sequence, frame_skip: int
) -> None:
    """A fresh game, then the sequence one emulator frame per entry; a preprocessed frame
    enters the history after every `frame_skip` frames (the authors' evaluation code)."""
    emulator.reset_game()
    history.clear()
    for i, action in enumerate(sequence):
        emulator.act(action)
        if (i + 1) % frame_skip in (0, frame_skip - 1):  # the two screens observe() pools
            emulator.capture()
        if (i + 1) % frame_skip == 0:
            history.push(emulator.observe())


def start_after_noops(emulator: Emulator, history: FrameHistory, noops: int) -> None:
    """A fresh game, then `noops` no-op frames as a training episode opens (an evaluation
    of a game that has no start states: not the paper's protocol)."""
    emulator.reset_game()
    history.clear()
    play_noops(emulator, noops)
    history.push(emulator.observe())


def start_without_sequence(emulator: Emulator, history: FrameHistory) -> None:
    """A fresh game whose first observation is the reset screen (the authors' evaluation
    of sticky-action agents)."""
    emulator.reset_game()
    history.clear()
    emulator.capture()
    emulator.capture()
    history.push(emulator.observe())
