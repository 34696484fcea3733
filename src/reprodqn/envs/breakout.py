"""The environment's old path, kept for one release: reprodqn.envs.atari serves every game,
and `BreakoutEnv` is its `AtariEnv` (importing either registers every game)."""

import warnings

from reprodqn.envs.atari import EMULATOR_FPS, ENV_ID, MODES, AtariEnv, env_id

BreakoutEnv = AtariEnv
__all__ = ["EMULATOR_FPS", "ENV_ID", "MODES", "AtariEnv", "BreakoutEnv", "env_id"]

warnings.warn(
    "reprodqn.envs.breakout is reprodqn.envs.atari (AtariEnv) now; import reprodqn.envs",
    DeprecationWarning,
    stacklevel=2,
)
