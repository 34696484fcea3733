"""`reprodqn <stage> ...`: one subcommand per pipeline stage, each a thin layer over a module.

Every subcommand takes --params (default params.yaml) and repeatable --set key.path=value.
Input errors print one line and exit 2; nothing already written is touched.
"""

from __future__ import annotations

import argparse
import sys
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
