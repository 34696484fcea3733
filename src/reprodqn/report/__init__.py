"""Results for a reader: Table 1 and the variance tests, the figures, the report pages,
the bundle and its citation and RO-Crate.

May import: core, determinism, config, dqn, training, evaluation."""
