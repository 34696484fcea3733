"""A run from step 0 to its last checkpoint: the Atari environment as the authors' code
plays it and the training loop, its chain and resume points kept through the public API.

May import: core, determinism, exact, config, dqn, universal."""
