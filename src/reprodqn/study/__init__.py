"""The study as jobs: the stage jobs of every group and run, the executors that run them
(local pool, Slurm), the launching of runs sharing one GPU (launch settings, MPS, the
sharing sweep) and the MLflow tracking of each.

May import: core, determinism, config, dqn, training, evaluation."""
