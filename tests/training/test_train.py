"""Training is deterministic, varies only where a seed says so, and resumes exactly."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from reprodqn.config.params import resolve_run
from reprodqn.core.errors import InputError
from reprodqn.core.workspace import checkpoint_path, read_hashes
from reprodqn.determinism import numerics
from reprodqn.determinism.checkpoints import load_weights
from reprodqn.training.loop import train
from tests.helpers import (
    ADAM,
    CENTERED,
    PARAMS,
    TINY,
    cli_env,
    stop_after_first_resume_point,
    train_command,
    train_tiny,
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The deterministic group's run 0 at tiny scale, trained once for this module."""
    from reprodqn.config.params import load_params

    params = load_params(PARAMS, TINY)
    run_dir = tmp_path_factory.mktemp("reference")
    return params, run_dir, train_tiny(params, run_dir)


def test_chain_covers_every_checkpoint_and_update(reference):
    params, run_dir, chain = reference
    assert [line["step"] for line in chain] == [0, 200, 400, 600]
    # the authors' count: updates at steps 204, 208, ... (t > 200, t % 4 == 0)
    assert [line["updates"] for line in chain] == [0, 0, 49, 99]
    assert chain[1]["loss_chain_sha256"] == "0" * 64 != chain[2]["loss_chain_sha256"]
    for line in chain:
        tensors, meta = load_weights(checkpoint_path(run_dir, line["step"]), line["weights_sha256"])
        assert meta["step"] == str(line["step"])
    process = [json.loads(x) for x in (run_dir / "process.jsonl").read_text().splitlines()]
    assert [r["step"] for r in process] == [100, 200, 300, 400, 500, 600]
    assert process[0]["loss"] is None and process[-1]["loss"] > 0
    assert process[-1]["epsilon"] == pytest.approx(0.1)  # annealed over steps 200..500


@pytest.mark.parametrize("cut", [True, False])
def test_training_episodes_end_at_each_evaluation_point_after_learning_starts(tmp_path, cut):
    """The authors evaluate inside training and then reset_game() (dqn/train.py ~122-127)."""
    from reprodqn.config.params import load_params
    from reprodqn.training.loop import Run

    params = load_params(
        PARAMS, [*TINY, f"train.end_episode_at_evaluation={cut}", "env.noop_max=0"]
    )
    run = Run(resolve_run(params, "deterministic", 0), tmp_path, torch.device("cpu"))
    new_games = []
    while run.step < 401:
        frames_before = run.env.emulator.ale.getEpisodeFrameNumber()
        run.advance()
        if run.env.emulator.ale.getEpisodeFrameNumber() < frames_before:
            new_games.append(run.step - 1)
    assert (400 in new_games) == cut  # other new games: the random policy lost a game
    if cut:
        assert run.episode_step == 0 and run.env.emulator.lives() == 5


def test_same_params_same_chain_even_with_poisoned_global_generators(reference, tmp_path):
    params, _, chain = reference
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002 -- poisoning the global generator is the point
    torch.manual_seed(3)
    before = random.getstate(), np.random.get_state(), torch.get_rng_state().clone()  # noqa: NPY002
    again = train_tiny(params, tmp_path / "again")
    after = random.getstate(), np.random.get_state(), torch.get_rng_state()  # noqa: NPY002
    assert again == chain
    # nothing drew from the global generators
    assert before[0] == after[0]
    assert np.array_equal(before[1][1], after[1][1]) and before[1][2:] == after[1][2:]
    assert torch.equal(before[2], after[2])


@pytest.mark.parametrize(
    "group, step0_equal",
    [
        ("initialization", False),
        ("exploration", True),
        ("minibatch", True),
        ("environment", True),
    ],
)
def test_varying_one_seed_changes_results_only_as_expected(reference, tmp_path, group, step0_equal):
    params, _, chain = reference
    varied = train_tiny(params, tmp_path / group, group=group, run=0)
    assert (varied[0]["weights_sha256"] == chain[0]["weights_sha256"]) == step0_equal
    assert varied[-1]["weights_sha256"] != chain[-1]["weights_sha256"]
    assert varied[-1]["loss_chain_sha256"] != chain[-1]["loss_chain_sha256"]
    if group == "minibatch":  # no update before learning starts: identical until then
        assert varied[1] == chain[1]
    if group == "environment":  # two sticky seeds: same start, different training
        other = train_tiny(params, tmp_path / "environment-1", group=group, run=1)
        assert other[0]["weights_sha256"] == varied[0]["weights_sha256"]
        assert other[-1]["weights_sha256"] != varied[-1]["weights_sha256"]


def test_two_threads_give_one_chain_run_after_run(tmp_path):
    """compute.threads: 2 (docs/speed.md's faster choice on a laptop) is deterministic for that
    count: two runs agree bit for bit, and the runs record the count they used."""
    from reprodqn.config.params import load_params

    params = load_params(PARAMS, [*TINY, "compute.threads=2"])
    first = train_tiny(params, tmp_path / "first")
    second = train_tiny(params, tmp_path / "second")
    assert first == second and first[-1]["updates"] > 0
    applied = json.loads((tmp_path / "first" / "determinism.json").read_text())
    assert applied["torch_threads"] == 2


def test_gpu_group_runs_with_deterministic_algorithms_off(reference, tmp_path):
    params, _, chain = reference
    run_dir = tmp_path / "gpu"
    gpu = train_tiny(params, run_dir, group="gpu", run=0)
    applied = json.loads((run_dir / "determinism.json").read_text())
    assert applied["deterministic_algorithms"] is False
    assert applied["torch_threads"] == 1
    if applied["device"] == "cpu":  # its sums' order drawn at random, as GPU kernels do
        conditions = json.loads((run_dir / "conditions.json").read_text())
        assert conditions["numerics"]["cpu_reduction_order"] == "random"
        again = train_tiny(params, tmp_path / "gpu-again", group="gpu", run=0)
        before_updates = [line for line in chain if line["updates"] == 0]
        assert before_updates and gpu[: len(before_updates)] == before_updates
        assert again[: len(before_updates)] == before_updates
        assert gpu[-1]["weights_sha256"] != chain[-1]["weights_sha256"]
        assert again[-1]["weights_sha256"] != gpu[-1]["weights_sha256"]


def test_determinism_settings_are_applied_and_recorded():
    device, applied = numerics.configure("cpu", 1, True)
    assert device.type == "cpu" and applied["deterministic_algorithms"] is True
    assert applied["cudnn_deterministic"] is True and applied["cudnn_benchmark"] is False
    assert (
        os.environ["CUBLAS_WORKSPACE_CONFIG"] == applied["environment"]["CUBLAS_WORKSPACE_CONFIG"]
    )
    assert applied["fp32_precision"]["cudnn_conv"] == "ieee"
    assert applied["fill_uninitialized_memory"] is False  # speed only: the chains show it
    assert torch.utils.deterministic.fill_uninitialized_memory is False  # what torch reads
    _, applied = numerics.configure("cpu", 1, False)
    assert applied["deterministic_algorithms"] is False and applied["cudnn_deterministic"] is False


def update_faults(params: Path) -> float:
    """Minor page faults per update of the study's network at its batch size, after three
    updates have sized the optimizer state and the heap."""
    import resource

    from reprodqn.config.params import load_params
    from reprodqn.dqn.agent import DQNAgent

    _, applied = numerics.configure("cpu", 1, True)
    assert applied["allocator"]["malloc"] == "glibc", applied["allocator"]
    config = load_params(params).agent
    agent = DQNAgent(
        config,
        n_actions=4,
        history_length=4,
        screen_size=84,
        device=torch.device("cpu"),
        init_generator=torch.Generator().manual_seed(0),
        learning_starts=0,
        reward_clip=1.0,
    )
    rng = np.random.default_rng(0)
    shape = (config.batch_size, 4, 84, 84)
    batch = {
        "states": rng.integers(0, 256, shape, dtype=np.uint8),
        "next_states": rng.integers(0, 256, shape, dtype=np.uint8),
        "actions": rng.integers(0, 4, config.batch_size).astype(np.uint8),
        "rewards": np.ones(config.batch_size, np.float32),
        "terminals": np.zeros(config.batch_size, bool),
    }
    for _ in range(3):
        agent.update(batch)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        agent.update(batch)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_updates_reuse_freed_memory_instead_of_faulting_it_back_in():
    """glibc unmaps every freed block of >= 128 KB; unless told not to, each update of the
    study's network at batch 32 page-faults its ~10 MB of buffers back in (~2,700 faults).
    Measured in a fresh interpreter, as a run is: a test worker's heap after other test
    files is not a run's (one measured 333 faults per update)."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as fresh:
        faults = fresh.submit(update_faults, PARAMS).result()
    assert faults < 200, f"{faults:.0f} minor page faults per update"


# ---------------------------------------------------------------------------------------------
# Exact resume


def test_stopped_run_resumes_to_the_same_chain(reference, tmp_path):
    params, _, chain = reference
    run_dir = tmp_path / "stopped"
    assert stop_after_first_resume_point(params, run_dir) == 300
    assert [h["step"] for h in read_hashes(run_dir)] == [0, 200]
    # a half-written later point (killed mid-save) must be ignored
    (run_dir / "resume" / ".step-000000600.partial").mkdir()
    assert train_tiny(params, run_dir) == chain
    assert not (run_dir / "resume").exists() and (run_dir / "complete.json").exists()


def test_corrupted_resume_point_is_named_and_nothing_is_lost(reference, tmp_path):
    params, _, _ = reference
    run_dir = tmp_path / "corrupt"
    stop_after_first_resume_point(params, run_dir)
    hashes_before = (run_dir / "hashes.jsonl").read_bytes()
    latest = json.loads((run_dir / "resume" / "latest.json").read_text())
    target = run_dir / "resume" / latest["directory"] / "replay.frames.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"replay\.frames\.npy: SHA-256 does not match"):
        train_tiny(params, run_dir)
    assert (run_dir / "hashes.jsonl").read_bytes() == hashes_before


def test_changed_params_refuse_an_existing_run_unless_restarted(reference, tmp_path):
    params, run_dir, chain = reference
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    from reprodqn.config.params import load_params

    changed = load_params(PARAMS, [*TINY, "agent.discount=0.9"])
    with pytest.raises(
        InputError,
        match=r"different params \(digest \w+, now \w+\): "
        r"agent\.discount \(now 0\.9, recorded 0\.99\);",
    ):
        train_tiny(changed, copy)
    assert read_hashes(copy) == chain
    config = resolve_run(changed, "deterministic", 0)
    for _ in train(config, copy, restart=True):
        pass
    assert read_hashes(copy) != chain


def test_corrupted_or_missing_checkpoint_is_reported(reference, tmp_path):
    _, run_dir, chain = reference
    source = checkpoint_path(run_dir, 200)
    broken = tmp_path / "broken.safetensors"
    data = bytearray(source.read_bytes())
    data[-3] ^= 0x55
    broken.write_bytes(bytes(data))
    with pytest.raises(InputError, match="does not match its recorded .* \\(corrupted\\)"):
        load_weights(broken)
    with pytest.raises(InputError, match="checkpoint not found"):
        load_weights(tmp_path / "nowhere.safetensors")
    with pytest.raises(InputError, match="does not match the expected"):
        load_weights(source, chain[-1]["weights_sha256"])


@pytest.mark.parametrize(
    "when, optimizer",
    [
        ("before-first-resume-point", []),
        ("after-a-resume-point", []),
        ("after-a-resume-point", CENTERED),
        ("after-a-resume-point", ADAM),
    ],
    ids=["before", "after", "after-rmsprop_centered", "after-adam"],
)
def test_sigkill_at_any_moment_then_rerun_gives_the_uninterrupted_chain(tmp_path, when, optimizer):
    """Kill a real `reprodqn train` process, run the same command again, compare chains;
    with the authors' optimizer and with each one whose state the resume point must hold."""
    overrides = [*TINY, "train.steps=1200", "train.resume_every=250", *optimizer]
    uninterrupted = tmp_path / "uninterrupted"
    subprocess.run(
        train_command(uninterrupted, overrides), check=True, capture_output=True, env=cli_env()
    )

    killed = tmp_path / "killed"
    run_dir = killed / "deterministic" / "0"
    command = train_command(killed, overrides)
    process = subprocess.Popen(
        command,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = (
        (run_dir / "process.jsonl")
        if when.startswith("before")
        else (run_dir / "resume" / "latest.json")
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "training finished before it could be killed"
    if when.startswith("after"):
        time.sleep(random.Random().uniform(0.0, 1.5))  # any moment after a resume point
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run_dir / "complete.json").exists()

    rerun = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert rerun.returncode == 0, rerun.stderr
    if when.startswith("after"):
        assert "resumed at step" in rerun.stderr
    expected = (uninterrupted / "deterministic" / "0" / "hashes.jsonl").read_bytes()
    assert (run_dir / "hashes.jsonl").read_bytes() == expected
    assert "steps/s" in rerun.stderr and "ETA" in rerun.stderr


@pytest.mark.slow
def test_nature_network_run_killed_three_times_ends_on_the_uninterrupted_chain(tmp_path):
    """The paper's network over a longer run, SIGKILLed at three random moments."""
    overrides = [
        *TINY,
        "agent.network=nature",
        "agent.batch_size=32",
        "train.steps=4000",
        "replay.learning_starts=1000",
        "train.checkpoint_every=1000",
        "train.resume_every=500",
        "agent.target_sync_every=1000",
    ]
    command = train_command(tmp_path / "killed", overrides, "minibatch", 3)
    subprocess.run(
        train_command(tmp_path / "whole", overrides, "minibatch", 3),
        check=True,
        capture_output=True,
        env=cli_env(),
    )
    run_dir = tmp_path / "killed" / "minibatch" / "3"
    rng = random.Random()
    for _ in range(3):
        process = subprocess.Popen(
            command,
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(8.0, 25.0))
        process.send_signal(signal.SIGKILL)
        process.wait()
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        env=cli_env(),
    )
    assert (run_dir / "hashes.jsonl").read_bytes() == (
        tmp_path / "whole" / "minibatch" / "3" / "hashes.jsonl"
    ).read_bytes()
