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

import multiprocessing
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from reprodqn.core import lifeline
from reprodqn.core.digests import sha256_file
from reprodqn.core.errors import InputError
from reprodqn.determinism import numerics, rng
from reprodqn.determinism.checkpoints import load_weights
from reprodqn.dqn.network import QNetwork, q_values
from reprodqn.training.atari import (
    Emulator,
    FrameHistory,
    frame_resize,
    replay_start_sequence,
    start_after_noops,
    start_without_sequence,
)

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
        return cls(
            env.game,
            env.frame_skip,
            env.history_length,
            env.screen_size,
            evaluation_config.max_frames,
            env.sticky_p,
            evaluation_config.inference_chunk,
            frame_resize(config),
            config.seeds.generator,
        )


@dataclass(frozen=True)
class EpisodeSpec:
    episode: int
    start_sequence: int | None = None  # index into the start-sequence file
    sticky_seed: int | None = None
    noops: int | None = None  # no start states: no-op frames after the reset screen

    def record(self) -> dict:
        """What identifies the episode (in the evaluation's digest); a field it does not
        use is left out when it came later, so earlier evaluations keep their digests."""
        fields = asdict(self)
        if self.noops is None:
            del fields["noops"]
        return fields


@dataclass(frozen=True)
class EpisodeResult:
    episode: int
    start_sequence: int | None
    sticky_seed: int | None
    score: int
    frames: int


def episode_specs(
    protocol: Protocol, episodes: int, sticky_seed_start: int, noop_max: int | None = None
) -> list[EpisodeSpec]:
    """Episode k: start sequence k; with sticky actions, the reset screen and sticky seed
    sticky_seed_start + k; given `noop_max` (a game without start states), the reset screen
    and 1..noop_max no-ops drawn from a stream seeded sticky_seed_start + k."""
    if protocol.sticky_p > 0:
        return [EpisodeSpec(k, sticky_seed=sticky_seed_start + k) for k in range(episodes)]
    if noop_max is not None:
        return [
            EpisodeSpec(k, noops=_noops(protocol.generator, sticky_seed_start + k, noop_max))
            for k in range(episodes)
        ]
    return [EpisodeSpec(k, start_sequence=k) for k in range(episodes)]


def _noops(generator: str, seed: int, noop_max: int) -> int:
    """The draw a training episode's no-op start makes, from the episode's own stream."""
    return rng.make_stream(generator, seed).integer(1, noop_max + 1) if noop_max > 0 else 0


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


class Episode:
    """One episode under the protocol, an agent step at a time: its start state on a fresh
    game (the start sequence replayed, or the reset screen with the episode's own sticky
    stream), then greedy steps. A lost life relaunches the ball (each minimal action once,
    uncounted); the episode ends at game over, and is cut at the frame cap. What `play`
    runs for each episode of a batch, and what the Gymnasium environment's eval mode runs."""

    def __init__(
        self,
        emulator: Emulator,
        history: FrameHistory,
        protocol: Protocol,
        spec: EpisodeSpec,
        sequences: Sequence[Sequence[int]] | None,
    ):
        p = self.protocol = protocol
        self.emulator, self.history, self.spec = emulator, history, spec
        if spec.sticky_seed is not None:  # this episode's own sticky stream
            emulator.sticky_p = p.sticky_p
            emulator.sticky_rng = rng.make_stream(p.generator, spec.sticky_seed)
        else:
            emulator.sticky_p, emulator.sticky_rng = 0.0, None
        if spec.start_sequence is not None:
            if sequences is None:
                raise ValueError("an episode from a start sequence needs the sequences")
            replay_start_sequence(emulator, history, sequences[spec.start_sequence], p.frame_skip)
        elif spec.noops is not None:
            start_after_noops(emulator, history, spec.noops)
        else:
            start_without_sequence(emulator, history)
        self.lives = emulator.lives()
        self.score = self.frames = 0

    def step(self, action_index: int) -> tuple[int, bool, bool]:
        """One agent step: (raw reward, game over, frame cap reached)."""
        emulator, p = self.emulator, self.protocol
        reward = emulator.repeat(emulator.action_set[action_index], p.frame_skip)
        self.score += reward
        self.frames += p.frame_skip
        self.history.push(emulator.observe())
        if emulator.game_over():
            return reward, True, False
        if emulator.lives() < self.lives:
            if emulator.relaunches:
                emulator.relaunch()
                self.history.push(emulator.observe())
            self.lives = emulator.lives()
        return reward, False, self.frames >= p.max_frames

    def result(self) -> EpisodeResult:
        s = self.spec
        return EpisodeResult(s.episode, s.start_sequence, s.sticky_seed, self.score, self.frames)


def play(
    net: QNetwork,
    specs: Sequence[EpisodeSpec],
    protocol: Protocol,
    sequences: Sequence[Sequence[int]] | None,
    emulators: Emulators | None = None,
) -> list[EpisodeResult]:
    """Play the episodes together in this process; one result per spec, in order."""
    p = protocol
    histories = np.zeros((len(specs), p.history_length, p.screen_size, p.screen_size), np.uint8)
    episodes = [
        Episode(
            emulator,
            FrameHistory(p.history_length, p.screen_size, histories[k]),
            p,
            spec,
            sequences,
        )
        for k, (emulator, spec) in enumerate(
            zip((emulators or Emulators(protocol)).take(len(specs)), specs, strict=True)
        )
    ]
    # Round robin over live episodes, a whole number of chunks per round (the rest wait for
    # the next one): no chunk is padded until fewer than one chunk's worth are left. The
    # order cannot change results: episodes are independent and every chunk the same size.
    live = deque(range(len(specs)))
    whole = getattr(net, "numerics", "standard") == "universal"  # batch-invariant: all at once
    while live:
        due = len(live) if whole or len(live) < p.chunk else len(live) - len(live) % p.chunk
        batch = [live.popleft() for _ in range(due)]
        actions = q_values(net, histories[batch], p.chunk).argmax(axis=1)
        for k, action in zip(batch, actions, strict=True):
            _, over, capped = episodes[k].step(int(action))
            if not (over or capped):
                live.append(k)
    return [episode.result() for episode in episodes]


TORCHSCRIPT_SUFFIXES = (".pt", ".ts")  # a policy saved with torch.jit.save, not a checkpoint


class ScriptedPolicy(torch.nn.Module):
    """A TorchScript policy (uint8 (N, 4, 84, 84) -> (N, A) Q-values, or (N,) actions as
    one-hot Q-values over the game's A actions) where the protocol expects a Q-network."""

    def __init__(self, module, n_actions: int, path: Path):
        super().__init__()
        self.module, self.n_actions, self.path = module, n_actions, path
        self.device_marker = torch.nn.Parameter(torch.zeros(0), requires_grad=False)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        out = self.module(frames)
        if out.dim() != 1:
            return out.to(torch.float32)
        actions = out.long()
        outside = actions[(actions < 0) | (actions >= self.n_actions)]
        if outside.numel():
            raise InputError(
                f"{self.path}: returned action {int(outside[0])}; expected 0 to "
                f"{self.n_actions - 1} (the game's {self.n_actions} actions)"
            )
        return torch.nn.functional.one_hot(actions, self.n_actions).to(torch.float32)


def load_network(
    path: Path, expected_sha256: str | None, device: torch.device, n_actions: int = 0
) -> QNetwork | ScriptedPolicy:
    """A Q-network from a checkpoint (or a TorchScript policy playing a game of n_actions
    actions), after checking its hash."""
    if Path(path).suffix in TORCHSCRIPT_SUFFIXES:
        if expected_sha256 is not None and sha256_file(path) != expected_sha256:
            raise InputError(
                f"{path}: file hash does not match the expected {expected_sha256[:12]}"
            )
        if n_actions < 1:
            raise ValueError("load_network: a TorchScript policy needs the game's n_actions")
        module = torch.jit.load(str(path), map_location=device)
        return ScriptedPolicy(module.eval(), n_actions, Path(path)).to(device).eval()
    tensors, meta = load_weights(path, expected_sha256)
    actions, history, side = (int(meta[k]) for k in ("n_actions", "history_length", "screen_size"))
    dueling, numerics = meta.get("dueling") == "True", meta.get("numerics", "standard")
    net = QNetwork(meta["network"], actions, history, side, dueling, numerics)
    net.load_state_dict(tensors)
    return net.to(device).eval()


# ---------------------------------------------------------------------------------------------
# Workers: each plays an interleaved share of a checkpoint's episodes


_WORKER: dict = {}


def _init_worker(
    device: str, deterministic_gpu: bool, protocol: Protocol, parent_line=None
) -> None:
    if parent_line is not None:  # kept referenced: collecting it would close the descriptor
        _WORKER["lifeline"] = parent_line
        lifeline.watch(parent_line, lifeline.exit_now)
    torch_device, applied = numerics.configure(device, EVAL_THREADS, deterministic_gpu)
    _WORKER.update(device=torch_device, applied=applied, nets={}, emulators=Emulators(protocol))


def _play_share(path: str, sha256: str, specs, protocol, sequences):
    nets = _WORKER["nets"]
    if (path, sha256) not in nets:
        nets.clear()
        n_actions = len(_WORKER["emulators"].take(1)[0].action_set)
        nets[(path, sha256)] = load_network(Path(path), sha256, _WORKER["device"], n_actions)
    return play(nets[(path, sha256)], specs, protocol, sequences, _WORKER["emulators"])


class Evaluator:
    """Evaluates checkpoints with `workers` processes (or in this process for 1).

    Each worker takes whole checkpoints, all queued at once: a worker whose episodes have
    ended starts the next checkpoint instead of waiting for the other's longest episode,
    and 100 episodes in one batch keep the Q-network chunks full for longest. With fewer
    checkpoints than workers, episodes are split instead.

    The workers hold a lifeline to this process: they exit the moment it dies (SIGKILL
    included) or leaves its `with` block by an exception, instead of playing on unowned."""

    def __init__(
        self,
        protocol: Protocol,
        sequences,
        workers: int,
        device: str = "cpu",
        deterministic_gpu: bool = True,
    ):
        self.protocol, self.sequences, self.workers = protocol, sequences, workers
        self._pool: ProcessPoolExecutor | None = None
        self._lifeline: lifeline.Lifeline | None = None
        if workers > 1:
            self._lifeline = lifeline.Lifeline()
            self._pool = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(device, deterministic_gpu, protocol, self._lifeline.reader),
            )
        else:
            _init_worker(device, deterministic_gpu, protocol)
        self.device = str(numerics.resolve_device(device))

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._pool is None or self._lifeline is None:
            return
        if exc_type is not None:  # a stop or a failure: no episode in flight is worth waiting for
            self._lifeline.cut()
        self._pool.shutdown(cancel_futures=True)
        self._lifeline.close()

    def evaluate_many(
        self, checkpoints: Sequence[tuple[Path, str]], specs: Sequence[EpisodeSpec]
    ) -> Iterator[list[EpisodeResult]]:
        """Results per checkpoint, in the order given, as each becomes available."""
        if self._pool is None:
            for path, sha256 in checkpoints:
                yield _play_share(str(path), sha256, specs, self.protocol, self.sequences)
            return
        parts = max(1, -(-self.workers // max(len(checkpoints), 1)))
        pending = []
        for path, sha256 in checkpoints:
            shares = [list(specs[w::parts]) for w in range(parts)]
            pending.append(
                [
                    self._pool.submit(
                        _play_share, str(path), sha256, share, self.protocol, self.sequences
                    )
                    for share in shares
                    if share
                ]
            )
        for futures in pending:
            results = [r for future in futures for r in future.result()]
            yield sorted(results, key=lambda r: r.episode)


def end_state_histories(sequences, protocol: Protocol) -> np.ndarray:
    """The frame history at the end of each start sequence (what the ranker scores)."""
    specs = [EpisodeSpec(k, start_sequence=k) for k in range(len(sequences))]
    return start_histories(specs, protocol, sequences)


def start_histories(specs: Sequence[EpisodeSpec], protocol: Protocol, sequences=None) -> np.ndarray:
    """The frame history each episode starts its greedy play from, whatever its start (a
    start sequence's end, the reset screen after no-ops): what a probe of max-Q scores."""
    p = protocol
    histories = np.zeros((len(specs), p.history_length, p.screen_size, p.screen_size), np.uint8)
    emulator = Emulator(p.game, 0.0, None, p.screen_size, p.resize)
    for k, spec in enumerate(specs):
        Episode(
            emulator,
            FrameHistory(p.history_length, p.screen_size, histories[k]),
            p,
            spec,
            sequences,
        )
    return histories
