"""Where and why two replications part: verify against a reference, re-run a prefix,
trace every op of a window, diff two traces, audit for nondeterminism.

May import: core, determinism, exact, config, dqn, training, evaluation, study, report."""
