"""reprodqn: a replicable, deterministic DQN on Atari Breakout (Nagarajan et al. 2019)."""

__version__ = "0.1.0"
