"""Does the agent learn? Train one variant at the paper's hyperparameters and, at each
checkpoint, print on `--states` of the authors' start states (default 20):

- the greedy evaluation score (the paper's protocol: start sequence, then greedy play for
  at most `--max-frames` emulator frames, life losses relaunched),
- the mean max_a Q over those start states (the Nature paper's "average action value"),
- how many distinct greedy actions the network picks across them,

beside the same three for the step-0 network and for a uniform-random policy (its own
seeded generator), so a score that has not left those baselines is visible at once.
Only the epsilon schedule, the learning start and the replay size may be shortened by
flags; every other value is params.yaml's (plus the variant's preset), unless `--set`
changes it for a diagnostic side check (the header names every such departure). Not for CI: a
meaningful check is >= 500K agent steps (about 2-3 hours per 500K steps on one core).

    .venv/bin/python experiments/learning_check.py --preset double --steps 500000 \\
        --epsilon-decay-steps 100000 --learning-starts 20000 --capacity 300000 \\
        --checkpoint-every 50000 --out build/learning-check/double
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import NoReturn

import numpy as np

from reprodqn.config.params import load_params
from reprodqn.config.variants import preset_path
from reprodqn.core.errors import InputError
from reprodqn.determinism import isa

ROOT = Path(__file__).resolve().parents[1]


def floor_from_argv() -> str:
    """The run's own compute.cpu_isa (its preset and --set included), read before torch loads."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--preset", default="dqn")
    early.add_argument("--set", action="append", default=[])
    known, _ = early.parse_known_args()
    overlay = [preset_path(ROOT / "params.yaml", known.preset)] if known.preset != "dqn" else []
    return load_params(ROOT / "params.yaml", known.set, overlay=overlay).compute.cpu_isa


def exit_with_one_line(error: Exception) -> NoReturn:
    """A wrong file or value: one line naming it, no traceback."""
    raise SystemExit(f"learning_check: error: {error}") from None


try:
    isa.apply(floor_from_argv())
except InputError as error:
    exit_with_one_line(error)

import torch  # noqa: E402

from reprodqn.config.params import resolve_run  # noqa: E402
from reprodqn.config.variants import algorithm_name, preset_names  # noqa: E402
from reprodqn.core import packaged, workspace  # noqa: E402
from reprodqn.core.atomic import write_text  # noqa: E402
from reprodqn.core.events import CheckpointWritten  # noqa: E402
from reprodqn.core.progress import format_duration, passing_progress  # noqa: E402
from reprodqn.dqn.network import q_values  # noqa: E402
from reprodqn.evaluation import start_states  # noqa: E402
from reprodqn.evaluation.protocol import (  # noqa: E402
    EpisodeSpec,
    Protocol,
    episode_specs,
    load_network,
    play,
    start_histories,
)
from reprodqn.training.atari import minimal_action_set  # noqa: E402
from reprodqn.training.loop import train  # noqa: E402


class RandomPolicy(torch.nn.Module):
    """Uniform-random actions: random Q-values from its own seeded generator."""

    def __init__(self, n_actions: int, seed: int = 0):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()), requires_grad=False)
        self.n_actions = n_actions
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return torch.rand(len(frames), self.n_actions, generator=self.generator)


def probe(net, protocol: Protocol, sequences, histories, specs) -> dict:
    """Greedy score, mean max-Q, distinct greedy actions and how much Q varies across the
    start states (std over states, averaged over actions: 0 for a network blind to the
    screen) on the start states."""
    scores = [r.score for r in play(net, specs, protocol, sequences)]
    q = q_values(net, histories, protocol.chunk).astype(np.float64)
    return {
        "score": float(np.mean(scores)),
        "max_q": float(q.max(axis=1).mean()),
        "greedy_actions": int(len(np.unique(q.argmax(axis=1)))),
        "q_spread": float(q.std(axis=0).mean()),
    }


def probe_checkpoint(run_dir: Path, line: dict, protocol, sequences, histories, specs) -> dict:
    path = workspace.checkpoint_path(run_dir, line["step"])
    net = load_network(path, line["weights_sha256"], torch.device("cpu"))
    return probe(net, protocol, sequences, histories, specs)


def config_for(args):
    overrides = [
        f"train.steps={args.steps}",
        f"train.checkpoint_every={args.checkpoint_every}",
        f"train.resume_every={args.resume_every}",
        f"compute.threads={args.threads}",
        "compute.device=cpu",
    ]
    for flag, key in (
        ("epsilon_decay_steps", "agent.epsilon_decay_steps"),
        ("learning_starts", "replay.learning_starts"),
        ("capacity", "replay.capacity"),
    ):
        if getattr(args, flag) is not None:
            overrides.append(f"{key}={getattr(args, flag)}")
    overrides += args.set
    overlay = [preset_path(ROOT / "params.yaml", args.preset)] if args.preset != "dqn" else []
    params = load_params(ROOT / "params.yaml", overrides, overlay=overlay)
    return params, resolve_run(params, "deterministic", 0)


def train_only(args) -> None:
    _, config = config_for(args)
    print(
        f"training only: {algorithm_name(config)} on {config.env.game}, {args.steps:,} steps, "
        f"checkpoints every {args.checkpoint_every:,}; run in {args.out}",
        flush=True,
    )
    start = time.monotonic()
    for event in passing_progress(train(config, args.out / "run"), "learning check"):
        if isinstance(event, CheckpointWritten):
            print(f"{event.step:>9,} {time.monotonic() - start:>7.0f}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset",
        default="dqn",
        help="dqn (params.yaml as it is) or one of "
        f"{', '.join(preset_names(ROOT / 'params.yaml'))}",
    )
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--checkpoint-every", type=int, default=50_000)
    parser.add_argument(
        "--resume-every",
        type=int,
        default=250_000,
        help="resume points (replay included); rerun the command to resume",
    )
    parser.add_argument("--epsilon-decay-steps", type=int, default=None)
    parser.add_argument("--learning-starts", type=int, default=None)
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a diagnostic departure from the paper's values, e.g. "
        "agent.rmsprop_eps=1e-6 (named in the header)",
    )
    parser.add_argument(
        "--states", type=int, default=20, help="episodes probed (start states used)"
    )
    parser.add_argument(
        "--start-sequences",
        default=None,
        help="a start-sequence file, or none: the reset screen after no-ops (default: "
        "params' for Breakout, start_sequences/GAME.json for another game that has them, "
        "else none)",
    )
    parser.add_argument("--max-frames", type=int, default=18_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("build/learning-check"))
    parser.add_argument(
        "--reprobe",
        action="store_true",
        help="train nothing: probe again every checkpoint the run in --out "
        "has written, and rewrite its learning_check.jsonl",
    )
    parser.add_argument(
        "--new-only",
        action="store_true",
        help="with --reprobe: keep the lines already in learning_check.jsonl and probe only "
        "the checkpoints written since (the same states and cap as before are yours to keep)",
    )
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="train and write checkpoints, probe nothing (probe them later with --reprobe): "
        "for a game whose start states do not exist yet",
    )
    args = parser.parse_args()
    if args.train_only:
        train_only(args)
        return
    if args.reprobe and not (args.out / "run" / "hashes.jsonl").exists():
        raise SystemExit(f"{args.out / 'run'}: no hashes.jsonl; nothing to probe (train first)")
    params, config = config_for(args)
    evaluation = params.evaluation.model_copy(update={"max_frames": args.max_frames})
    protocol = Protocol.for_run(config, evaluation)
    chosen = args.start_sequences or start_states.for_game(params.evaluation, config.env.game)
    if chosen == start_states.NONE:  # a game without start states: reset screen + no-ops
        sequences = None
        specs = episode_specs(protocol, args.states, 0, config.env.noop_max)
    else:
        sequences = start_states.load(packaged.start_sequences(chosen))["sequences"][: args.states]
        specs = [EpisodeSpec(k, start_sequence=k) for k in range(len(sequences))]
    histories = start_histories(specs, protocol, sequences)
    print(
        f"learning check: {algorithm_name(config)}, {args.steps:,} steps, epsilon "
        f"{config.agent.epsilon_start}->{config.agent.epsilon_final} over "
        f"{config.agent.epsilon_decay_steps:,} from step {config.replay.learning_starts:,}, "
        f"replay {config.replay.capacity:,}; {len(specs)} episodes from {chosen}, "
        f"{args.max_frames} frames; run in {args.out}",
        flush=True,
    )
    if args.set:
        print(f"departures from the paper's values: {', '.join(args.set)}", flush=True)
    n_actions = len(minimal_action_set(config.env.game))
    random_policy = probe(RandomPolicy(n_actions), protocol, sequences, histories, specs)
    print(
        f"{'step':>9} {'score':>7} {'max_q':>8} {'acts':>4} {'spread':>8} | {'step-0':>7} "
        f"{'acts':>4} {'spread':>8} | {'random':>7} | {'elapsed':>8} {'eta':>7}",
        flush=True,
    )
    run_dir, log = args.out / "run", args.out / "learning_check.jsonl"
    start, lines, step0 = time.monotonic(), [], None
    last = workspace.read_hashes(run_dir)[-1]["step"] if args.reprobe else args.steps
    origin: int | None = None  # the first step this process probes, where its ETA counts from

    def record(step: int, found: dict) -> None:
        nonlocal step0
        if step0 is None:  # the step-0 network: this run's first checkpoint
            first = workspace.read_hashes(run_dir)[0]
            step0 = (
                found
                if step == first["step"]
                else probe_checkpoint(run_dir, first, protocol, sequences, histories, specs)
            )
        lines.append(
            json.dumps({"step": step, **found, "step0": step0, "random": random_policy}) + "\n"
        )
        if args.reprobe:
            write_text(log, "".join(lines))  # whole, or not at all
        else:
            with open(log, "a") as handle:
                handle.write(lines[-1])
        elapsed = time.monotonic() - start
        print(
            f"{step:>9,} {found['score']:>7.2f} {found['max_q']:>8.4f} "
            f"{found['greedy_actions']:>4} {found['q_spread']:>8.5f} | {step0['score']:>7.2f} "
            f"{step0['greedy_actions']:>4} {step0['q_spread']:>8.5f} | "
            f"{random_policy['score']:>7.2f} | {elapsed:>7.0f}s {eta(step, elapsed):>7}",
            flush=True,
        )

    def eta(step: int, elapsed: float) -> str:
        """Time left at the rate so far (probes of a stronger agent play longer games, and
        training before learning starts is cheaper: an estimate, refined at every line)."""
        nonlocal origin
        origin = step if origin is None else origin
        done, left = step - origin, last - step
        return format_duration(elapsed * left / done) if done > 0 else "-"

    if args.reprobe:
        kept = log.read_text().splitlines(keepends=True) if args.new_only and log.exists() else []
        if kept:
            lines.extend(kept)
            step0 = json.loads(kept[0])["step0"]
        probed = {json.loads(line)["step"] for line in kept}
        for line in workspace.read_hashes(run_dir):
            if line["step"] in probed:
                continue
            record(
                line["step"], probe_checkpoint(run_dir, line, protocol, sequences, histories, specs)
            )
        return
    for event in passing_progress(train(config, run_dir), "learning check"):
        if isinstance(event, CheckpointWritten):
            record(
                event.step,
                probe(
                    load_network(event.path, event.weights_sha256, torch.device("cpu")),
                    protocol,
                    sequences,
                    histories,
                    specs,
                ),
            )


if __name__ == "__main__":
    try:
        main()
    except InputError as error:
        exit_with_one_line(error)
