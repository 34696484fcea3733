"""How many jobs run at once: a launch setting from the environment, never a param."""

from __future__ import annotations

import pytest

from reprodqn.core import workers
from reprodqn.core.errors import InputError


def test_worker_count_comes_from_the_environment_not_params(monkeypatch):
    monkeypatch.setenv("REPRODQN_WORKERS", "3")
    assert workers.default_workers(threads=1) == 3
    monkeypatch.setenv("REPRODQN_WORKERS", "zero")
    with pytest.raises(InputError, match="REPRODQN_WORKERS=zero: expected a positive integer"):
        workers.default_workers(threads=1)


def test_a_lockstep_runs_game_workers_count_as_its_cores(monkeypatch):
    """Runs x game workers never oversubscribe: with K = 2 a lockstep training job takes 2
    cores (the trainer and its games never run at once), so 2 cores run one job."""
    monkeypatch.delenv("REPRODQN_WORKERS", raising=False)
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.setattr(workers, "visible_gpus", lambda: [])
    monkeypatch.setenv(workers.ACTOR_WORKERS_ENV, "2")
    assert workers.cores_per_training_job(threads=1, actors=4) == 2
    assert workers.default_workers(workers.cores_per_training_job(threads=1, actors=4)) == 1
    assert workers.cores_per_training_job(threads=1, actors=1) == 1  # K unused at N = 1
    assert workers.default_workers(workers.cores_per_training_job(threads=1, actors=1)) == 2
    monkeypatch.setenv(workers.ACTOR_WORKERS_ENV, "two")
    with pytest.raises(InputError, match="REPRODQN_ACTOR_WORKERS=two"):
        workers.actor_workers()


GIB = 2**30
REPLAY_1M = 7_063_000_000  # replay_bytes(1_000_000, 84)


@pytest.fixture
def one_gpu_machine(monkeypatch):
    """16 cores, 128 GiB of host memory and one 80 GiB GPU, as the lent H100 machine."""
    monkeypatch.delenv("REPRODQN_WORKERS", raising=False)
    monkeypatch.delenv(workers.RUNS_PER_GPU_ENV, raising=False)
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda _: set(range(16)), raising=False)
    monkeypatch.setattr(workers, "visible_gpus", lambda: ["0"])
    monkeypatch.setattr(workers, "gpu_memory_bytes", lambda: [80 * GIB])
    monkeypatch.setattr(workers, "host_memory_bytes", lambda: 128 * GIB)
    return monkeypatch


def test_a_gpu_takes_as_many_runs_as_pay_when_memory_holds_them(one_gpu_machine):
    from reprodqn.dqn.replay import replay_bytes

    assert replay_bytes(1_000_000, 84) == REPLAY_1M
    on_gpu = workers.Footprint(gpu_bytes=REPLAY_1M)
    assert workers.default_workers(1, on_gpu) == workers.PAYING_RUNS_PER_GPU


def test_runs_per_gpu_stop_where_memory_or_cores_run_out(one_gpu_machine):
    one_gpu_machine.setattr(workers, "PAYING_RUNS_PER_GPU", 16)
    # the GPU's 80 GiB hold 9 device replays of 1M (7.06 GB + 2 GiB each), not 16
    assert workers.default_workers(1, workers.Footprint(gpu_bytes=REPLAY_1M)) == 9
    # the host's 128 GiB hold 13 host replays of 1M (7.06 GB + 3 GiB each)
    assert workers.default_workers(1, workers.Footprint(host_bytes=REPLAY_1M)) == 13
    # 2 threads a run on 16 cores: 8 runs
    assert workers.default_workers(2, workers.Footprint()) == 8
    one_gpu_machine.setenv(workers.RUNS_PER_GPU_ENV, "3")
    assert workers.default_workers(1, workers.Footprint(gpu_bytes=REPLAY_1M)) == 3
    one_gpu_machine.setenv(workers.RUNS_PER_GPU_ENV, "many")
    with pytest.raises(InputError, match="REPRODQN_RUNS_PER_GPU=many: expected a positive"):
        workers.default_workers(1)


def test_a_studys_footprint_is_its_largest_replay_where_it_lives():
    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.study.stages import training_footprint
    from tests.helpers import PARAMS

    def footprint(*overrides: str) -> workers.Footprint:
        params = load_params(PARAMS, list(overrides))
        return training_footprint([resolve_run(params, g, r) for g, r in params.study.run_ids()])

    assert footprint() == workers.Footprint(host_bytes=REPLAY_1M)
    assert footprint(
        "compute.numerics=standard", "compute.replay_on_device=true"
    ) == workers.Footprint(gpu_bytes=REPLAY_1M)
    assert footprint("replay.capacity=1000") == workers.Footprint(host_bytes=1000 * 7063)
