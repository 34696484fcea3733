"""The paper's evaluation protocol, played for many episodes at once.

Per checkpoint: greedy episodes, each from its own start state — a fresh game, the start
sequence replayed frame by frame, then greedy play with frame skip 4 for at most 18,000
frames (5 minutes). A lost life does not end the episode: each minimal action is played
once, uncounted, so FIRE relaunches the ball (the authors' code). The episode ends on game
over or at the cap; its score is the raw (unclipped) reward sum. Agents trained with
sticky actions get no start sequence; episode k uses sticky seed k instead.

Speed: live episodes are stepped together and their Q-values computed in fixed-size
chunks, so one episode's actions do not depend on its batch-mates; worker processes each
play an interleaved share of the episodes (ALE holds the GIL, so threads would not help).
The result of every episode is the same as when it is played alone.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from reprodqn import determinism, rng, workspace
from reprodqn.atari import Emulator, FrameHistory, replay_start_sequence, start_without_sequence
from reprodqn.checkpoints import load_weights
from reprodqn.config import json_digest
from reprodqn.launch import default_workers
from reprodqn.network import QNetwork, q_values
from reprodqn.progress import Progress

EVAL_THREADS = 1  # per worker; parallelism comes from processes, so results never depend on it


@dataclass(frozen=True)
class Protocol:
    """Everything about how an episode is played, besides the network."""

    game: str
    frame_skip: int
    history_length: int
    screen_size: int
    max_frames: int
    sticky_p: float
    chunk: int
    resize: str
    generator: str  # the family of the per-episode sticky streams

    @classmethod
    def for_run(cls, config, evaluation_config) -> Protocol:
        """From a run's (or the base params') env and seeds, and the evaluation params."""
        env = config.env
        return cls(env.game, env.frame_skip, env.history_length, env.screen_size,
                   evaluation_config.max_frames, env.sticky_p,
                   evaluation_config.inference_chunk, env.resize, config.seeds.generator)


@dataclass(frozen=True)
class EpisodeSpec:
    episode: int
    start_sequence: int | None = None  # index into the start-sequence file
    sticky_seed: int | None = None


@dataclass(frozen=True)
class EpisodeResult:
    episode: int
    start_sequence: int | None
    sticky_seed: int | None
    score: int
    frames: int


def episode_specs(protocol: Protocol, episodes: int, sticky_seed_start: int) -> list[EpisodeSpec]:
    if protocol.sticky_p > 0:
        return [EpisodeSpec(k, sticky_seed=sticky_seed_start + k) for k in range(episodes)]
    return [EpisodeSpec(k, start_sequence=k) for k in range(episodes)]


# ---------------------------------------------------------------------------------------------
# Playing


class Emulators:
    """Emulators kept for reuse: loading the ROM costs ~0.1 s, a reset is the same game."""

    def __init__(self, protocol: Protocol):
        self.protocol = protocol
        self._emulators: list[Emulator] = []

    def take(self, n: int) -> list[Emulator]:
        p = self.protocol
        while len(self._emulators) < n:
            self._emulators.append(Emulator(p.game, 0.0, None, p.screen_size, p.resize))
        return self._emulators[:n]


def play(net: QNetwork, specs: Sequence[EpisodeSpec], protocol: Protocol,
         sequences: Sequence[Sequence[int]] | None,
         emulators: Emulators | None = None) -> list[EpisodeResult]:
    """Play the episodes together in this process; one result per spec, in order."""
    n = len(specs)
    p = protocol
    histories = np.zeros((n, p.history_length, p.screen_size, p.screen_size), np.uint8)
    emulators = (emulators or Emulators(protocol)).take(n)
    views = []
    for k, spec in enumerate(specs):
        emulator = emulators[k]
        if spec.sticky_seed is not None:  # this episode's own sticky stream
            emulator.sticky_p = p.sticky_p
            emulator.sticky_rng = rng.make_stream(p.generator, spec.sticky_seed)
        else:
            emulator.sticky_p, emulator.sticky_rng = 0.0, None
        view = FrameHistory(p.history_length, p.screen_size, histories[k])
        if spec.start_sequence is not None:
            replay_start_sequence(emulator, view, sequences[spec.start_sequence], p.frame_skip)
        else:
            start_without_sequence(emulator, view)
        views.append(view)
    lives = [e.lives() for e in emulators]
    scores, frames = [0] * n, [0] * n
    # Round robin over live episodes, a whole number of chunks per round (the rest wait for
    # the next one): no chunk is padded until fewer than one chunk's worth are left. The
    # order cannot change results: episodes are independent and every chunk the same size.
    live = deque(range(n))
    while live:
        due = len(live) if len(live) < p.chunk else len(live) - len(live) % p.chunk
        batch = [live.popleft() for _ in range(due)]
        actions = q_values(net, histories[batch], p.chunk).argmax(axis=1)
        for k, action in zip(batch, actions, strict=True):
            emulator = emulators[k]
            scores[k] += emulator.repeat(emulator.action_set[action], p.frame_skip)
            frames[k] += p.frame_skip
            views[k].push(emulator.observe())
            if emulator.game_over():
                continue
            if emulator.lives() < lives[k]:
                emulator.relaunch()
                views[k].push(emulator.observe())
                lives[k] = emulator.lives()
            if frames[k] < p.max_frames:
                live.append(k)
    return [EpisodeResult(s.episode, s.start_sequence, s.sticky_seed, scores[k], frames[k])
            for k, s in enumerate(specs)]


def load_network(path: Path, expected_sha256: str | None, device: torch.device) -> QNetwork:
    """A Q-network from a checkpoint, after checking its hash."""
    tensors, meta = load_weights(path, expected_sha256)
    net = QNetwork(meta["network"], int(meta["n_actions"]), int(meta["history_length"]),
                   int(meta["screen_size"]), dueling=meta.get("dueling") == "True")
    net.load_state_dict(tensors)
    return net.to(device).eval()


# ---------------------------------------------------------------------------------------------
# Workers: each plays an interleaved share of a checkpoint's episodes


_WORKER: dict = {}


def _init_worker(device: str, deterministic_gpu: bool, protocol: Protocol) -> None:
    torch_device, applied = determinism.configure(device, EVAL_THREADS, deterministic_gpu)
    _WORKER.update(device=torch_device, applied=applied, nets={},
                   emulators=Emulators(protocol))


def _play_share(path: str, sha256: str, specs, protocol, sequences):
    nets = _WORKER["nets"]
    if (path, sha256) not in nets:
        nets.clear()
        nets[(path, sha256)] = load_network(Path(path), sha256, _WORKER["device"])
    return play(nets[(path, sha256)], specs, protocol, sequences, _WORKER["emulators"])


class Evaluator:
    """Evaluates checkpoints with `workers` processes (or in this process for 1).

    Each worker takes whole checkpoints, all queued at once: a worker whose episodes have
    ended starts the next checkpoint instead of waiting for the other's longest episode,
    and 100 episodes in one batch keep the Q-network chunks full for longest. With fewer
    checkpoints than workers, episodes are split instead."""

    def __init__(self, protocol: Protocol, sequences, workers: int, device: str = "cpu",
                 deterministic_gpu: bool = True):
        self.protocol, self.sequences, self.workers = protocol, sequences, workers
        self._pool = None
        if workers > 1:
            self._pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker, initargs=(device, deterministic_gpu, protocol))
        else:
            _init_worker(device, deterministic_gpu, protocol)
        self.device = str(determinism.resolve_device(device))

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def evaluate(self, path: Path, sha256: str,
                 specs: Sequence[EpisodeSpec]) -> list[EpisodeResult]:
        return next(self.evaluate_many([(path, sha256)], specs))

    def evaluate_many(self, checkpoints: Sequence[tuple[Path, str]],
                      specs: Sequence[EpisodeSpec]) -> Iterator[list[EpisodeResult]]:
        """Results per checkpoint, in the order given, as each becomes available."""
        if self._pool is None:
            for path, sha256 in checkpoints:
                yield _play_share(str(path), sha256, specs, self.protocol, self.sequences)
            return
        parts = max(1, -(-self.workers // max(len(checkpoints), 1)))
        pending = []
        for path, sha256 in checkpoints:
            shares = [list(specs[w::parts]) for w in range(parts)]
            pending.append([self._pool.submit(_play_share, str(path), sha256, share,
                                              self.protocol, self.sequences)
                            for share in shares if share])
        for futures in pending:
            results = [r for future in futures for r in future.result()]
            yield sorted(results, key=lambda r: r.episode)


# ---------------------------------------------------------------------------------------------
# A run's evaluation: every checkpoint in hashes.jsonl -> eval.csv


@dataclass(frozen=True)
class CheckpointEvaluated:
    index: int
    total: int
    step: int
    mean_score: float
    agent_steps: int
    resumed: bool = False


def evaluation_digest(protocol: Protocol, specs, sequences_sha256: str | None,
                      hashes: list[dict]) -> str:

    body = {"protocol": asdict(protocol), "specs": [asdict(s) for s in specs],
            "start_sequences": sequences_sha256,
            "checkpoints": [[h["step"], h["weights_sha256"]] for h in hashes],
            "inference_threads": EVAL_THREADS}
    return json_digest(body)


def evaluate_run(run_dir: Path, out_dir: Path, hashes: list[dict], evaluator: Evaluator, specs,
                 digest: str, start_states: dict | None = None) -> Iterator[CheckpointEvaluated]:
    """Evaluate every checkpoint of `run_dir` into `out_dir`/eval.csv (a directory of its
    own: DVC lets no stage write inside another's outputs); progress survives interruption
    per checkpoint."""
    from reprodqn.files import append_line, write_json, write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    progress_path = out_dir / workspace.EVAL_PROGRESS
    done: dict[int, list[dict]] = {}
    if progress_path.exists():
        for line in progress_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything before it stands
            if entry.get("digest") == digest:
                done[entry["step"]] = entry["results"]
        progress_path.write_text("".join(
            json.dumps({"digest": digest, "step": s, "results": r}) + "\n"
            for s, r in done.items()))

    todo = [(workspace.checkpoint_path(run_dir, h["step"]), h["weights_sha256"]) for h in hashes
            if h["step"] not in done]
    fresh = evaluator.evaluate_many(todo, specs)
    rows = []
    for index, line in enumerate(hashes):
        step = line["step"]
        resumed = step in done
        if resumed:
            results = [EpisodeResult(**r) for r in done[step]]
        else:
            results = next(fresh)
            append_line(progress_path, json.dumps(
                {"digest": digest, "step": step, "results": [asdict(r) for r in results]}))
        rows += [{"step": step, **asdict(r)} for r in results]
        yield CheckpointEvaluated(index + 1, len(hashes), step,
                                  float(np.mean([r.score for r in results])),
                                  sum(r.frames for r in results) // evaluator.protocol.frame_skip,
                                  resumed)

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, workspace.EVAL_CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(out_dir / workspace.EVAL_CSV, buffer.getvalue())
    write_json(out_dir / workspace.EVAL_JSON, {
        "digest": digest, "protocol": asdict(evaluator.protocol), "episodes": len(specs),
        "inference_threads": EVAL_THREADS, "workers": evaluator.workers,
        "device": evaluator.device, "start_states": start_states,
    })
    progress_path.unlink(missing_ok=True)


def end_state_histories(sequences, protocol: Protocol) -> np.ndarray:
    """The frame history at the end of each start sequence (what the ranker scores)."""
    p = protocol
    histories = np.zeros((len(sequences), p.history_length, p.screen_size, p.screen_size),
                         np.uint8)
    emulator = Emulator(p.game, 0.0, None, p.screen_size, p.resize)
    for k, sequence in enumerate(sequences):
        view = FrameHistory(p.history_length, p.screen_size, histories[k])
        replay_start_sequence(emulator, view, sequence, p.frame_skip)
    return histories


# ---------------------------------------------------------------------------------------------
# The evaluate stage for one run


@dataclass(frozen=True)
class EvaluatedRun:
    """What the evaluate stage did for one run, for the probe and tracking that follow."""

    config: object  # the run's RunConfig
    run_dir: Path
    out_dir: Path
    hashes: list
    digest: str
    protocol: Protocol


def evaluate_stage(params, group: str, run: int, runs: Path, evaluations: Path,
                   start_sequences: Path | None, workers: int | None) -> EvaluatedRun:
    """Evaluate every checkpoint of runs/GROUP/RUN, unless eval.csv already holds this
    evaluation (same protocol, start states and checkpoints)."""
    from reprodqn.config import resolve_run
    from reprodqn.errors import InputError
    from reprodqn.files import read_json

    config = resolve_run(params, group, run)
    run_dir = workspace.run_dir(runs, group, run)
    if not (run_dir / workspace.COMPLETE).exists():
        raise InputError(f"{run_dir}: training is not complete; run `reprodqn train "
                         f"--group {group} --run {run}` first")
    hashes = workspace.read_hashes(run_dir)
    protocol = Protocol.for_run(config, params.evaluation)
    specs = episode_specs(protocol, params.evaluation.episodes,
                          params.evaluation.sticky_seed_start)
    sequences, sequences_sha, used = None, None, None
    if protocol.sticky_p == 0:
        from reprodqn import start_states

        path = Path(start_sequences or params.evaluation.start_sequences)
        doc = start_states.load(path, at_least=params.evaluation.episodes)
        sequences, sequences_sha = doc["sequences"], doc["sequences_sha256"]
        used = start_states.summary(doc, path)
    digest = evaluation_digest(protocol, specs, sequences_sha, hashes)
    label = f"evaluate {group}/{run}"
    out_dir = workspace.eval_dir(evaluations, group, run)
    record = out_dir / workspace.EVAL_JSON
    if (out_dir / workspace.EVAL_CSV).exists() and record.exists() and read_json(
            record, "evaluation record").get("digest") == digest:
        print(f"{label}: already evaluated", file=sys.stderr)
    else:
        evaluator = Evaluator(protocol, sequences, workers or default_workers(threads=1),
                              config.compute.device, config.compute.deterministic_gpu)
        with evaluator:
            _evaluate_with_progress(label, run_dir, out_dir, hashes, evaluator, specs, digest,
                                    used)
    return EvaluatedRun(config, run_dir, out_dir, hashes, digest, protocol)


def _evaluate_with_progress(label, run_dir, out_dir, hashes, evaluator, specs, digest,
                            used) -> None:
    progress = Progress(label, len(hashes), unit="checkpoints", interval=0)
    agent_steps = 0
    start = time.monotonic()
    for event in evaluate_run(run_dir, out_dir, hashes, evaluator, specs, digest, used):
        agent_steps += event.agent_steps
        rate = agent_steps / max(time.monotonic() - start, 1e-9)
        note = ("kept from an interrupted evaluation" if event.resumed
                else f"{rate:.0f} agent steps/s")
        progress.update(event.index, extra=f"step {event.step}: mean score "
                        f"{event.mean_score:.2f} ({note})")
