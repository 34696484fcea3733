"""The paper's evaluation protocol: episodes from start states played by worker
processes, the evaluate stage, the start states and their ranking by max-Q, and the
blind-network probe.

May import: core, determinism, config, dqn, training."""
