"""The Gymnasium face of the game and the protocol, for agents that are not reprodqn's: built
on training's game and evaluation's protocol, never a copy of them.

May import: core, determinism, config, training, evaluation."""
