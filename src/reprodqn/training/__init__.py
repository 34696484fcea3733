"""A run from step 0 to its last checkpoint: the Atari environment as the authors' code
plays it, the training loop, resume points and checkpoints.

May import: core, determinism, config, dqn."""
