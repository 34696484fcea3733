"""Evaluation speed: the batched, multi-process evaluator against a one-episode-at-a-time
evaluator with batch-1 inference, and against raw ALE emulation on the same cores.

Plays the paper's protocol (start sequences, 18,000-frame cap, life-loss relaunch) with a
Nature network (random init, or --checkpoint) on 100 start sequences. All three are
measured in this run, in alternating rounds. Targets: >= 3x the one-at-a-time evaluator,
>= 45% of raw emulation.

    .venv/bin/python bench/eval_throughput.py [--workers N] [--episodes 100] [--checkpoint F]
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import common
import numpy as np
import torch

from reprodqn.determinism.checkpoints import cpu_weights, save_weights
from reprodqn.dqn.network import build_q_network
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import EpisodeSpec, Evaluator, Protocol, load_network
from reprodqn.training.atari import Emulator, FrameHistory, replay_start_sequence


def one_at_a_time(net, protocol: Protocol, sequences, indices) -> tuple[int, list]:
    """The straightforward evaluator (as in the authors' code): one episode after another,
    Q-values of one state per forward pass, torch's default threads."""
    emulator = Emulator(protocol.game, 0.0, None, protocol.screen_size)
    history = FrameHistory(protocol.history_length, protocol.screen_size)
    steps, scores = 0, []
    with torch.inference_mode():
        for k in indices:
            replay_start_sequence(emulator, history, sequences[k], protocol.frame_skip)
            lives, frames, score = emulator.lives(), 0, 0
            while not emulator.game_over() and frames < protocol.max_frames:
                q = net(torch.from_numpy(history.frames).unsqueeze(0))
                action = emulator.action_set[int(q.argmax(dim=1).item())]
                score += emulator.repeat(action, protocol.frame_skip)
                frames += protocol.frame_skip
                steps += 1
                history.push(emulator.observe())
                if emulator.lives() < lives and not emulator.game_over():
                    emulator.relaunch()
                    history.push(emulator.observe())
                    lives = emulator.lives()
            scores.append(score)
    return steps, scores


def _emulate(seconds: float, queue) -> None:
    emulator = Emulator("breakout", 0.0, None, 84)
    rng = np.random.default_rng(os.getpid())
    frames, start = 0, time.perf_counter()
    actions = rng.choice([0, 1, 3, 4], 4096)
    while time.perf_counter() - start < seconds:
        for a in actions[:256]:
            emulator.ale.act(int(a))
        frames += 256
        if emulator.game_over():
            emulator.reset_game()
    queue.put(frames / (time.perf_counter() - start))


def raw_emulation(workers: int, seconds: float = 8.0) -> float:
    """Frames per second of bare ale.act() in `workers` processes at once."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    processes = [ctx.Process(target=_emulate, args=(seconds, queue)) for _ in range(workers)]
    for p in processes:
        p.start()
    rates = [queue.get() for _ in processes]
    for p in processes:
        p.join()
    return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument(
        "--baseline-every",
        type=int,
        default=5,
        help="the slow evaluator plays every n-th episode (a rate is a rate)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        action="append",
        default=[],
        help="checkpoints to evaluate (default: --nets random-init Nature nets)",
    )
    parser.add_argument("--nets", type=int, default=6)
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="Q-value chunk (default: params evaluation.inference_chunk)",
    )
    parser.add_argument(
        "--raw-seconds", type=float, default=5.0, help="raw emulation time per round"
    )
    args = parser.parse_args()

    params = common.load()
    protocol = Protocol.for_run(params, params.evaluation)
    if args.chunk:  # another fixed chunk: other Q bits, so other actions than chunk 16's
        protocol = dataclasses.replace(protocol, chunk=args.chunk)
    sequences = start_states.generate_candidates(params.start_states)["sequences"]
    sequences = sequences[: args.episodes]
    workdir = Path(tempfile.mkdtemp())
    checkpoints = [(path, None) for path in args.checkpoint]
    if not checkpoints:
        for seed in range(args.nets):
            net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(seed))
            path = workdir / f"net{seed}.safetensors"
            sha = save_weights(
                path,
                cpu_weights(net),
                {
                    "step": seed,
                    "network": "nature",
                    "n_actions": 4,
                    "history_length": 4,
                    "screen_size": 84,
                },
            )
            checkpoints.append((path, sha))
    specs = [EpisodeSpec(k, start_sequence=k) for k in range(len(sequences))]

    # Rounds of one checkpoint per worker; in each, all three are timed back to back, so a
    # drift in machine speed (seen here: raw emulation 5.4k-7.6k steps/s within minutes)
    # hits all three alike.
    torch.set_num_threads(os.cpu_count() or 1)  # the one-at-a-time evaluator's default
    subset = list(range(0, len(sequences), args.baseline_every))
    results = []
    ours_seconds = base_seconds = 0.0
    base_steps, raw_rates, agree = 0, [], True
    with Evaluator(protocol, sequences, args.workers) as evaluator:
        # every worker builds its emulators once per `evaluate` command (ROM loads)
        list(evaluator.evaluate_many([checkpoints[0]] * args.workers, specs))
        for first in range(0, len(checkpoints), args.workers):
            round_checkpoints = checkpoints[first : first + args.workers]
            start = time.perf_counter()
            round_results = list(evaluator.evaluate_many(round_checkpoints, specs))
            ours_seconds += time.perf_counter() - start
            results += round_results
            for (path, sha), ours_results in zip(round_checkpoints, round_results, strict=True):
                net = load_network(path, sha, torch.device("cpu"))
                start = time.perf_counter()
                steps, scores = one_at_a_time(net, protocol, sequences, subset)
                base_seconds += time.perf_counter() - start
                base_steps += steps
                agree &= scores == [ours_results[k].score for k in subset]
            raw_rates.append(raw_emulation(args.workers, args.raw_seconds))
    ours_steps = sum(r.frames for rs in results for r in rs) // protocol.frame_skip
    ours = ours_steps / ours_seconds
    base = base_steps / base_seconds
    raw_frames = float(np.mean(raw_rates))
    raw = raw_frames / protocol.frame_skip
    lengths = np.array([r.frames // protocol.frame_skip for rs in results for r in rs])

    print(
        f"protocol: {len(specs)} episodes per checkpoint from start sequences, cap "
        f"{protocol.max_frames} frames, Q chunk {protocol.chunk}, {args.workers} workers; "
        f"{len(checkpoints)} checkpoints "
        f"({'given' if args.checkpoint else 'random-init Nature nets: short, skewed episodes'})"
    )
    print(
        f"episode length (agent steps): median {np.median(lengths):.0f}, "
        f"90th percentile {np.percentile(lengths, 90):.0f}, max {lengths.max()}"
    )
    print(
        f"batched evaluator      {ours:8.0f} agent steps/s  ({ours_steps} steps in "
        f"{ours_seconds:.1f} s)"
    )
    print(
        f"one at a time, batch-1 {base:8.0f} agent steps/s  ({base_steps} steps, every "
        f"{args.baseline_every}th episode, {torch.get_num_threads()} torch threads; same "
        f"scores: {agree})"
    )
    print(
        f"raw ALE emulation      {raw:8.0f} agent steps/s  ({raw_frames:.0f} frames/s in "
        f"{args.workers} processes, {len(raw_rates)} rounds)"
    )
    print(f"ratio to one-at-a-time {ours / base:8.2f}x  (target >= 3x)")
    print(f"share of raw emulation {100 * ours / raw:8.1f}%  (target >= 45%)")


if __name__ == "__main__":
    common.run_main(main)
