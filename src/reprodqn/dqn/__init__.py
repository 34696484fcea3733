"""The learning agent, independent of any game: the Q-networks, the agent (acting, the
learning rule, schedules), its optimizers, the replay memory and prioritized replay.

May import: core, determinism, universal."""
