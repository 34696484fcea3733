"""`reprodqn <stage> ...`: one subcommand per pipeline stage, each a thin layer over a module.

Every subcommand takes --params (default params.yaml) and repeatable --set key.path=value.
Input errors print one line and exit 2; nothing already written is touched.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from reprodqn.errors import InputError


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default="params.yaml", type=Path,
                        help="parameters file (default: params.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY.PATH=VALUE", help="override one parameter (repeatable)")


def _load(args):
    from reprodqn.config import load_params

    return load_params(args.params, args.overrides)


# ---------------------------------------------------------------------------------------------
# train


def cmd_train(args) -> int:
    from reprodqn.config import resolve_run
    from reprodqn.train import train

    params = _load(args)
    config = resolve_run(params, args.group, args.run)
    run_dir = args.runs_dir / args.group / str(args.run)
    report_training(train(config, run_dir, restart=args.restart), f"train {args.group}/{args.run}")
    return 0


def report_training(events, label: str) -> None:
    """Print a run's progress from its events."""
    from reprodqn.progress import Progress
    from reprodqn.train import Finished, ProcessRecord, Started

    progress = None
    for event in events:
        if isinstance(event, Started):
            how = f"resumed at step {event.step}" if event.resumed else "started"
            print(f"{label}: {how}", file=sys.stderr, flush=True)
            progress = Progress(label, event.total, start=event.step)
        elif isinstance(event, ProcessRecord) and progress is not None:
            record = event.record
            loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
            progress.update(event.step, extra=f"loss {loss}, epsilon {record['epsilon']:.3f}")
        elif isinstance(event, Finished):
            state = "already complete" if event.already else "complete"
            print(f"{label}: {state} ({event.step} steps)", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# start sequences


def cmd_candidates(args) -> int:
    from reprodqn import start_states
    from reprodqn.files import write_json

    params = _load(args)
    doc = start_states.generate_candidates(params.start_states)
    write_json(args.out, doc)
    lengths = [len(s) for s in doc["sequences"]]
    print(f"candidates: {doc['count']} sequences of {min(lengths)}-{max(lengths)} frames "
          f"-> {args.out}", file=sys.stderr)
    return 0


def cmd_ranker(args) -> int:
    import shutil

    from reprodqn.checkpoints import load_weights
    from reprodqn.config import ranker_run
    from reprodqn.files import atomic_open, write_json
    from reprodqn.train import checkpoint_path, train

    params = _load(args)
    out = args.out
    if params.ranker.checkpoint:
        source = Path(params.ranker.checkpoint)
        _, meta = load_weights(source)
        origin = {"source": str(source)}
    else:
        config = ranker_run(params)
        run_dir = out / "run"
        report_training(train(config, run_dir, restart=True), "ranker")
        source = checkpoint_path(run_dir, config.train.steps)
        _, meta = load_weights(source)
        origin = {"source": "trained", "steps": config.train.steps,
                  "config_digest": config.digest()}
    with atomic_open(out / "ranker.safetensors", "wb") as handle, open(source, "rb") as src:
        shutil.copyfileobj(src, handle)
    write_json(out / "ranker.json", {**origin, "weights_sha256": meta["weights_sha256"],
                                     "network": meta["network"]})
    print(f"ranker: weights {meta['weights_sha256'][:12]} -> {out / 'ranker.safetensors'}",
          file=sys.stderr)
    return 0


def cmd_select(args) -> int:
    from reprodqn import start_states
    from reprodqn.evaluate import Protocol, end_state_histories, load_network
    from reprodqn.files import sha256_file
    from reprodqn.network import q_values

    params = _load(args)
    candidates = start_states.load(args.candidates, params.start_states.candidates)
    import torch

    net = load_network(args.ranker, None, torch.device("cpu"))
    ranker_sha = start_states.read_ranker_hash(args.ranker)
    protocol = Protocol.for_run(params.env, params.evaluation)
    histories = end_state_histories(candidates["sequences"], protocol)
    max_q = q_values(net, histories, protocol.chunk).max(axis=1)
    doc = start_states.select(candidates, max_q, params.start_states, ranker_sha,
                              sha256_file(args.candidates), args.out_dir)
    print(f"select: ranked {len(max_q)} end states by max-Q, kept {doc['count']} of the top "
          f"{params.start_states.top_k} -> {args.out_dir / 'selected.json'}", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from reprodqn import start_states

    params = _load(args)
    doc = start_states.import_authors_file(args.file, args.out, params.start_states.selected)
    print(f"start-states import: {doc['count']} sequences, sha256 "
          f"{doc['sequences_sha256'][:12]} -> {args.out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# evaluate


def default_workers() -> int:
    import os

    value = os.environ.get("REPRODQN_WORKERS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"REPRODQN_WORKERS={value}: expected a positive integer")
        return int(value)
    return os.cpu_count() or 1


def cmd_evaluate(args) -> int:
    from reprodqn import evaluate as ev
    from reprodqn import start_states
    from reprodqn.config import resolve_run
    from reprodqn.files import read_json
    from reprodqn.progress import Progress
    from reprodqn.train import read_hashes

    params = _load(args)
    config = resolve_run(params, args.group, args.run)
    run_dir = args.runs_dir / args.group / str(args.run)
    if not (run_dir / "complete.json").exists():
        raise InputError(f"{run_dir}: training is not complete; run `reprodqn train "
                         f"--group {args.group} --run {args.run}` first")
    hashes = read_hashes(run_dir)
    protocol = ev.Protocol.for_run(config.env, params.evaluation)
    specs = ev.episode_specs(protocol, params.evaluation.episodes,
                             params.evaluation.sticky_seed_start)
    sequences, sequences_sha = None, None
    if protocol.sticky_p == 0:
        path = Path(args.start_sequences or params.evaluation.start_sequences)
        doc = start_states.load(path, params.start_states.selected)
        sequences, sequences_sha = doc["sequences"], doc["sequences_sha256"]
    digest = ev.evaluation_digest(protocol, specs, sequences_sha, hashes)
    label = f"evaluate {args.group}/{args.run}"
    if (run_dir / "eval.csv").exists() and (run_dir / "eval.json").exists():
        if read_json(run_dir / "eval.json", "evaluation record").get("digest") == digest:
            print(f"{label}: already evaluated", file=sys.stderr)
            return 0
    workers = args.workers or default_workers()
    progress = Progress(label, len(hashes), unit="checkpoints", interval=0)
    agent_steps = 0
    start = time.monotonic()
    with ev.Evaluator(protocol, sequences, workers, config.compute.device,
                      config.compute.deterministic_gpu) as evaluator:
        for event in ev.evaluate_run(run_dir, hashes, evaluator, specs, digest):
            agent_steps += event.agent_steps
            rate = agent_steps / max(time.monotonic() - start, 1e-9)
            note = ("kept from an interrupted evaluation" if event.resumed
                    else f"{rate:.0f} agent steps/s")
            progress.update(event.index, extra=f"step {event.step}: mean score "
                            f"{event.mean_score:.2f} ({note})")
    return 0


# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reprodqn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="STAGE")

    p = sub.add_parser("train", help="train one agent of the study into runs/GROUP/RUN")
    _common(p)
    p.add_argument("--group", required=True, help="study group, e.g. deterministic")
    p.add_argument("--run", required=True, type=int, help="run index within the group")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default: runs")
    p.add_argument("--restart", action="store_true",
                   help="discard an existing run trained with different params")
    p.set_defaults(handler=cmd_train)

    p = sub.add_parser("candidates", help="draw the random start-sequence candidates")
    _common(p)
    p.add_argument("--out", type=Path, default=Path("start_sequences/candidates.json"))
    p.set_defaults(handler=cmd_candidates)

    p = sub.add_parser("ranker", help="train the ranking DQN (or adopt ranker.checkpoint)")
    _common(p)
    p.add_argument("--out", type=Path, default=Path("ranker"))
    p.set_defaults(handler=cmd_ranker)

    p = sub.add_parser("select", help="rank candidates by the ranker's max-Q, draw the 100")
    _common(p)
    p.add_argument("--candidates", type=Path, default=Path("start_sequences/candidates.json"))
    p.add_argument("--ranker", type=Path, default=Path("ranker/ranker.safetensors"))
    p.add_argument("--out-dir", type=Path, default=Path("start_sequences"))
    p.set_defaults(handler=cmd_select)

    p = sub.add_parser("start-states", help="start-sequence files from other sources")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    q = verbs.add_parser("import", help="import the authors' initstates.txt format")
    _common(q)
    q.add_argument("file", type=Path, help="one Python list of ALE action ids per line")
    q.add_argument("--out", type=Path, default=Path("start_sequences/authors.json"))
    q.set_defaults(handler=cmd_import)

    p = sub.add_parser("evaluate", help="evaluate every checkpoint of runs/GROUP/RUN")
    _common(p)
    p.add_argument("--group", required=True)
    p.add_argument("--run", required=True, type=int)
    p.add_argument("--runs-dir", type=Path, default=Path("runs"))
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: $REPRODQN_WORKERS or one per core)")
    p.add_argument("--start-sequences", type=Path, default=None,
                   help="default: evaluation.start_sequences in params")
    p.set_defaults(handler=cmd_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except InputError as exc:
        print(f"reprodqn: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("reprodqn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
