"""The Gymnasium face of the game and the protocol, for agents that are not reprodqn's: built
on training's game and evaluation's protocol, never a copy of them. Importing it registers
reprodqn/{Name}-v0 for every game ale-py ships: `gymnasium.register_envs(reprodqn.envs)`.

May import: core, determinism, config, training, evaluation."""

from reprodqn.envs.atari import ENV_ID, AtariEnv, env_id, register_all

__all__ = ["ENV_ID", "AtariEnv", "env_id"]

register_all()
