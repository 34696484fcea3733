"""N lockstep actors (train.actors): one result for any number of game workers, exact
resume after SIGKILL with no worker left behind, per-actor streams and replay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest

from reprodqn.config.params import load_params, resolve_run
from reprodqn.config.variants import algorithm_name
from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.core.workers import ACTOR_WORKERS_ENV as WORKERS_ENV
from reprodqn.determinism.rng import make_stream
from reprodqn.dqn.actor_replay import ActorReplay
from reprodqn.dqn.replay import ReplayMemory
from tests.helpers import PARAMS, TINY, cli_env, label, train_command, train_tiny

FOUR = [*TINY, "train.actors=4"]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    """N = 4 with the games in the trainer's own process."""
    run_dir = tmp_path_factory.mktemp("in-process")
    return run_dir, train_tiny(load_params(PARAMS, FOUR), run_dir)


def worker_sittings(run_dir) -> list[dict]:
    path = run_dir / workspace.ACTOR_WORKERS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("workers", ["1", "2", "4"])
def test_the_chain_is_the_same_for_any_number_of_game_workers(
    in_process, tmp_path, monkeypatch, workers
):
    reference_dir, reference = in_process
    monkeypatch.setenv(WORKERS_ENV, workers)
    assert train_tiny(load_params(PARAMS, FOUR), tmp_path) == reference
    (sitting,) = worker_sittings(tmp_path)
    assert sitting["step"] == 0 and sitting["actors"] == 4
    assert len(set(sitting["pids"])) == int(workers)  # each worker's own os.getpid()
    assert os.getpid() not in sitting["pids"]
    assert worker_sittings(reference_dir) == []  # the reference ran no worker


def test_updates_count_transitions_as_with_one_actor(in_process):
    _, chain = in_process
    assert [line["step"] for line in chain] == [0, 200, 400, 600]
    assert [line["updates"] for line in chain] == [0, 0, 49, 99]  # as test_train's N = 1


def test_the_number_of_actors_is_part_of_the_experiment(in_process, tmp_path):
    """N is in the run's digest and changes its results: not a launch setting."""
    _, chain = in_process
    one, four = (
        resolve_run(load_params(PARAMS, items), "deterministic", 0) for items in (TINY, FOUR)
    )
    assert one.digest() != four.digest()
    assert algorithm_name(four) == "DQN, 4 lockstep actors (RMSprop)"  # report, MLflow tag
    two = train_tiny(load_params(PARAMS, [*TINY, "train.actors=2"]), tmp_path)
    assert two[-1]["weights_sha256"] != chain[-1]["weights_sha256"]


def test_sigkill_then_rerun_gives_the_uninterrupted_chain_and_leaves_no_worker(tmp_path):
    """`reprodqn train` (the CPU floor applied, as in every job), the games in-process
    uninterrupted, in 2 workers killed after a resume point and run again."""
    subprocess.run(
        train_command(tmp_path / "whole", FOUR), check=True, capture_output=True, env=cli_env()
    )
    reference = workspace.read_hashes(tmp_path / "whole" / "deterministic" / "0")
    argv = train_command(tmp_path, FOUR)
    env = cli_env(**{WORKERS_ENV: "2"})
    trainer = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "deterministic" / "0"
    latest = run_dir / "resume" / workspace.RESUME_INDEX
    deadline = time.monotonic() + 120
    while not latest.exists() and trainer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    assert latest.exists(), "killed before the first resume point"
    assert not (run_dir / workspace.COMPLETE).exists()
    resumed_from = json.loads(latest.read_text())["step"]
    (sitting,) = worker_sittings(run_dir)
    _, alive = psutil.wait_procs([p for p in map(_process, sitting["pids"]) if p], timeout=10)
    assert not alive  # the workers saw their pipes close and left

    subprocess.run(argv, env=env, check=True, capture_output=True)
    assert workspace.read_hashes(run_dir) == reference
    first, second = worker_sittings(run_dir)
    assert second["step"] == resumed_from > 0
    assert set(first["pids"]).isdisjoint(second["pids"])


def _process(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except psutil.NoSuchProcess:
        return None


@pytest.mark.parametrize("family", ["authors", "pcg64"])
def test_actor_zero_keeps_the_runs_stream_and_the_others_derive_theirs(family):
    def draws(stream):
        return [stream.integer(0, 1 << 30) for _ in range(5)]

    assert draws(make_stream(family, 7, actor=0)) == draws(make_stream(family, 7))
    derived = {k: draws(make_stream(family, 7, actor=k)) for k in range(1, 4)}
    if family == "authors":  # the rule as documented: RandomState([seed, k])
        assert derived[2] == list(np.random.RandomState([7, 2]).randint(0, 1 << 30, 5))
    else:
        generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 2])))
        assert derived[2] == list(generator.integers(0, 1 << 30, 5))
    assert len({str(d) for d in [draws(make_stream(family, 7)), *derived.values()]}) == 4


def test_a_sampled_state_never_mixes_actors_or_episodes():
    """Frames labelled (actor, time); two actors with episodes of different lengths."""
    memories = [ReplayMemory(64, 4, 2) for _ in range(2)]
    replay = ActorReplay(memories)
    for t in range(100):  # past capacity: the write position wraps
        for actor in range(2):
            length = 7 if actor == 0 else 11
            replay.add(actor, label(actor * 1000 + t), 0, 0.0, t % length == length - 1, t % length)
    rng = make_stream("pcg64", 3)
    for _ in range(50):
        batch = replay.sample(16, rng)
        actors, slots = batch["indices"] % 2, batch["indices"] // 2
        for state, actor, slot in zip(batch["states"], actors, slots, strict=True):
            ids = [int(np.frombuffer(frame.tobytes(), np.uint32)[0]) for frame in state]
            assert {i // 1000 for i in ids} == {actor}
            assert np.all(np.diff(ids) == 1)  # four consecutive frames of one actor
            assert memories[actor].valid(int(slot))


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.checkpoint_every=202", "train.checkpoint_every"),
        ("replay.capacity=1002", "replay.capacity"),
        ("replay.prioritized=true", "replay.prioritized"),
    ],
)
def test_intervals_that_split_a_round_are_refused_with_one_line(override, named):
    with pytest.raises(InputError) as error:
        load_params(PARAMS, [*TINY, "train.actors=4", override])
    assert named in str(error.value) and "\n" not in str(error.value)
