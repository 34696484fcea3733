"""The `reprodqn` command: the dispatcher and its command groups.

May import: core, determinism, exact, config, dqn, training, evaluation, study,
report, forensics."""
