"""The evaluation protocol, checked against a plain reimplementation of the authors' loop on
raw ALE, and batched play checked against one episode at a time."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from ale_py import ALEInterface, roms

from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from reprodqn.core.workspace import read_eval
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.dqn.network import QNetwork, build_q_network
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import (
    EpisodeSpec,
    Evaluator,
    Protocol,
    episode_specs,
    load_network,
    play,
)
from reprodqn.evaluation.stage import evaluate_run, evaluation_digest
from reprodqn.training.atari import Emulator, FrameHistory, preprocess, replay_start_sequence
from tests.helpers import PARAMS

ACTIONS = (0, 1, 3, 4)


def protocol(max_frames=2000, sticky_p=0.0, chunk=16):
    return Protocol("breakout", 4, 4, 84, max_frames, sticky_p, chunk, "linear", "authors")


def constant_policy(action_index: int) -> QNetwork:
    """A network whose Q-values are its output bias: it always picks one action."""
    net = QNetwork("nips", 4, 4, 84)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.layers[-1].bias[action_index] = 1.0
    return net


def sequences(n=6, seed=0):
    doc = start_states.generate_candidates(
        load_params(PARAMS).start_states.model_copy(
            update={"candidates": n, "candidates_seed": seed}
        )
    )
    return doc["sequences"]


# -- a plain version of the authors' eval.py on raw ALE, for constant policies ---------------


def authors_episode(sequence, action, max_frames, sticky_seed=None, sticky_p=0.0):
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("breakout"))
    # the authors' eval: set_action_seed(k) makes RandomState(k), drawn with uniform(0, 1)
    rng = np.random.RandomState(sticky_seed) if sticky_seed is not None else None
    previous = [0]

    def act(a):
        if sticky_p > 0 and rng.uniform(0, 1) < sticky_p:
            a = previous[0]
        previous[0] = a
        return ale.act(a)

    ale.reset_game()
    for a in sequence or []:
        act(a)
    frames = score = 0
    lives = ale.lives()
    while not (ale.game_over() or frames >= max_frames):
        for _ in range(4):
            score += act(action)
            frames += 1
        if ale.lives() < lives:
            for a in ACTIONS:  # the action sweep: not counted
                act(a)
            lives = ale.lives()
    return score, frames


@pytest.mark.parametrize("action_index", [0, 2])  # NOOP: relaunch matters; RIGHT: it moves
def test_start_sequence_protocol_matches_the_authors_loop(action_index):
    seqs = sequences()
    results = play(
        constant_policy(action_index),
        [EpisodeSpec(k, start_sequence=k) for k in range(len(seqs))],
        protocol(max_frames=4000),
        seqs,
    )
    for k, result in enumerate(results):
        assert (result.score, result.frames) == authors_episode(
            seqs[k], ACTIONS[action_index], 4000
        )
    if action_index == 0:  # a paddle that never moves loses every life and the game ends
        assert all(r.frames < 4000 for r in results)  # only because FIRE relaunched the ball


def test_cap_counts_frames_after_the_start_sequence():
    seqs = sequences(3)
    results = play(
        constant_policy(2),
        [EpisodeSpec(k, start_sequence=k) for k in range(3)],
        protocol(max_frames=40),
        seqs,
    )
    assert [r.frames for r in results] == [40, 40, 40]


def test_sticky_seed_protocol_matches_the_authors_loop():
    specs = episode_specs(protocol(sticky_p=0.25), 4, sticky_seed_start=0)
    assert [s.sticky_seed for s in specs] == [0, 1, 2, 3] and specs[0].start_sequence is None
    results = play(constant_policy(1), specs, protocol(max_frames=3000, sticky_p=0.5), None)
    expected = [authors_episode(None, 1, 3000, sticky_seed=k, sticky_p=0.5) for k in range(4)]
    assert [(r.score, r.frames) for r in results] == expected
    assert len({r.frames for r in results}) > 1  # different seeds, different episodes


def test_start_sequence_replay_adds_a_frame_every_four_frames():
    sequence = sequences(1)[0][:58]  # 58 frames: 14 history frames, 2 frames left over
    emulator = Emulator("breakout", 0.0, None, 84)
    history = FrameHistory(4, 84)
    replay_start_sequence(emulator, history, sequence, 4)
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("breakout"))
    screens, expected = [], []
    for i, action in enumerate(sequence):
        ale.act(action)
        screens.append(ale.getScreenRGB())
        if (i + 1) % 4 == 0:
            expected.append(preprocess(np.stack(screens[-2:]), 84))
    assert len(expected) == 14
    assert np.array_equal(history.frames, np.stack(expected[-4:]))
    short = FrameHistory(4, 84)
    replay_start_sequence(emulator, short, sequence[:9], 4)  # two frames: zeros before them
    assert not short.frames[:2].any() and np.array_equal(short.frames[2:], np.stack(expected[:2]))


def test_batched_play_equals_playing_each_episode_alone():
    seqs = sequences(5, seed=3)
    net = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(5))
    specs = [EpisodeSpec(k, start_sequence=k) for k in range(5)]
    together = play(net, specs, protocol(max_frames=1200, chunk=4), seqs)
    alone = [play(net, [spec], protocol(max_frames=1200, chunk=4), seqs)[0] for spec in specs]
    assert together == alone
    assert len({(r.score, r.frames) for r in together}) > 1


# -- a run's evaluation -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_with_checkpoints(tmp_path_factory):
    """A run directory with three checkpoints of different networks and a start file."""
    root = tmp_path_factory.mktemp("evalrun")
    run_dir = root / "runs" / "deterministic" / "0"
    hashes = []
    for i, step in enumerate((0, 100, 200)):
        net = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(i))
        tensors = {k: v.clone() for k, v in net.state_dict().items()}
        digest = save_weights(
            run_dir / "checkpoints" / f"step-{step:09d}.safetensors",
            tensors,
            {
                "step": step,
                "network": "nips",
                "n_actions": 4,
                "history_length": 4,
                "screen_size": 84,
            },
        )
        hashes.append({"step": step, "weights_sha256": digest})
    return root, run_dir, hashes


def run_evaluation(run_dir, hashes, workers, seqs, max_frames=800):
    proto = protocol(max_frames=max_frames)
    specs = [EpisodeSpec(k, start_sequence=k) for k in range(len(seqs))]
    digest = evaluation_digest(proto, specs, "s", hashes)
    with Evaluator(proto, seqs, workers) as evaluator:
        return list(evaluate_run(run_dir, run_dir / "eval", hashes, evaluator, specs, digest))


def test_evaluating_twice_and_with_workers_gives_identical_files(run_with_checkpoints, tmp_path):
    _, run_dir, hashes = run_with_checkpoints
    seqs = sequences(4, seed=1)
    events = run_evaluation(run_dir, hashes, 1, seqs)
    out = run_dir / "eval"
    first = (out / "eval.csv").read_bytes()
    assert [e.step for e in events] == [0, 100, 200]
    rows = read_eval(out)
    assert len(rows) == 12 and rows[0].keys() == {
        "step",
        "episode",
        "start_sequence",
        "sticky_seed",
        "score",
        "frames",
    }
    run_evaluation(run_dir, hashes, 1, seqs)
    assert (out / "eval.csv").read_bytes() == first
    run_evaluation(run_dir, hashes, 2, seqs)
    assert (out / "eval.csv").read_bytes() == first
    assert not (out / "eval.progress.jsonl").exists()


def test_an_interrupted_evaluation_keeps_finished_checkpoints(run_with_checkpoints, tmp_path):
    _, source, hashes = run_with_checkpoints
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    seqs = sequences(3, seed=2)
    proto = protocol(max_frames=400)
    specs = [EpisodeSpec(k, start_sequence=k) for k in range(3)]
    digest = evaluation_digest(proto, specs, "s", hashes)
    out = tmp_path / "out"
    with Evaluator(proto, seqs, 1) as evaluator:
        events = evaluate_run(run_dir, out, hashes, evaluator, specs, digest)
        next(events)
        next(events)
        events.close()  # stopped after two checkpoints
    with open(out / "eval.progress.jsonl", "a") as handle:
        handle.write('{"digest": "cut mid-li')  # as a kill mid-write leaves it
    with Evaluator(proto, seqs, 1) as evaluator:
        resumed = list(evaluate_run(run_dir, out, hashes, evaluator, specs, digest))
    assert [e.resumed for e in resumed] == [True, True, False]
    fresh = tmp_path / "fresh"
    with Evaluator(proto, seqs, 1) as evaluator:
        list(evaluate_run(run_dir, fresh, hashes, evaluator, specs, digest))
    assert (out / "eval.csv").read_bytes() == (fresh / "eval.csv").read_bytes()


def test_a_checkpoint_that_does_not_match_its_hash_stops_evaluation(run_with_checkpoints, tmp_path):
    _, source, hashes = run_with_checkpoints
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    (run_dir / "eval").mkdir(exist_ok=True)
    (run_dir / "eval" / "eval.csv").write_text("previous results\n")
    wrong = [dict(hashes[0]), dict(hashes[1], weights_sha256=hashes[2]["weights_sha256"])]
    with pytest.raises(
        InputError, match="step-000000100.safetensors: weights hash .* does not match the expected"
    ):
        run_evaluation(run_dir, wrong, 1, sequences(2))
    assert (run_dir / "eval" / "eval.csv").read_text() == "previous results\n"
    with pytest.raises(InputError, match="checkpoint not found"):
        load_network(
            run_dir / "checkpoints" / "step-000000999.safetensors", None, torch.device("cpu")
        )
