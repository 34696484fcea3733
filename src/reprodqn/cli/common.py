"""What every `reprodqn` subcommand shares: --params and --set, params loaded once with the
CPU instruction-set floor applied before torch loads, and how a subcommand is declared."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reprodqn.core import packaged, workspace
from reprodqn.core.errors import InputError

# what runs anywhere with the package's own params when no params.yaml is here: the
# protocol for another agent, the params explained or written, start states imported
WORKSPACE_FREE = ("evaluate-policy", "params", "start-states", "gpu-check")


def add_params_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params",
        default=None,
        type=Path,
        help="parameters file (default: params.yaml; for a command with "
        "--reference, the reference's own params.yaml if it has one)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one parameter (repeatable)",
    )


class _SetGame(argparse.Action):
    """--game NAME: --set env.game=NAME, said as what it is."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.overrides = [*namespace.overrides, f"env.game={values}"]
        namespace.said_as = {f"--set env.game={values}": f"--game {values}"}  # in its errors


def add_game_argument(parser: argparse.ArgumentParser) -> None:
    """--game NAME, for a command that plays a game given from outside a workspace."""
    parser.add_argument(
        "--game",
        action=_SetGame,
        metavar="NAME",
        help="the game it plays (env.game; default breakout), with that game's "
        "start states the package carries unless --start-sequences names others",
    )


def resolve_params_path(args) -> None:
    """An explicit --params wins; else a command comparing with a reference (a workspace or
    an unpacked bundle: verify --reference, trace --resume of a shipped resume point) takes
    the reference's own params.yaml, so a reader can run it from any directory; else
    ./params.yaml; where there is none, the package's own for a command that needs no
    workspace, and a one-line error naming `reprodqn init` for one that does. `verify A B`
    takes the package's own: its folders come from any script that keeps reprodqn.exact's
    chain, run beside a params.yaml of that script's own."""
    if not hasattr(args, "params") or args.params is not None:
        return
    if getattr(args, "folders", None):
        args.params = packaged.default_params()
        return
    candidates = []
    reference = getattr(args, "reference", None)
    if reference is not None:
        if not Path(reference).is_dir():
            unpack = (
                f"; unpack it first: tar -xzf {reference}" if ".tar" in Path(reference).name else ""
            )
            raise InputError(
                f"--reference {reference}: not a directory (expected a workspace or an "
                f"unpacked bundle{unpack})"
            )
        candidates.append(Path(reference) / "params.yaml")
    if getattr(args, "resume", None) is not None:  # a bundle's resume-points/GROUP/RUN/STEP
        candidates += [parent / "params.yaml" for parent in Path(args.resume).parents][:4]
    shipped = next((c for c in candidates if c.is_file()), None)
    here = Path("params.yaml")
    if shipped is None and not here.is_file():
        if args.command not in WORKSPACE_FREE:
            there = "" if reference is None else f"{reference} (where a bundle has one) nor in "
            raise InputError(
                f"no params.yaml in {there}{Path.cwd()}: `reprodqn {args.command}` runs in a "
                "study workspace; make one with `reprodqn init [DIR]` (or name a file: --params)"
            )
        shipped = packaged.default_params()
    args.params = shipped or here


def notice(line: str) -> None:
    """A one-line note beside a command's output (e.g. the keys a params file lacks)."""
    print(line, file=sys.stderr)


def load(args):
    """Params, loaded once per command, with the CPU instruction-set floor applied before
    anything imports torch (main() calls this before any handler runs)."""
    from reprodqn.config.params import load_params
    from reprodqn.determinism import isa

    if getattr(args, "loaded_params", None) is None:
        try:
            args.loaded_params = load_params(args.params, args.overrides, notice=notice)
        except InputError as error:  # a flag's value is named as the flag the user gave
            line = str(error)
            for ours, theirs in getattr(args, "said_as", {}).items():
                line = line.replace(ours, theirs)
            raise InputError(line) from None
        compute = args.loaded_params.compute
        isa.apply(compute.cpu_isa, compute.numerics)
    return args.loaded_params


def stage(sub, name: str, help_text: str, handler) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text)
    add_params_arguments(p)
    p.set_defaults(handler=handler)
    return p


def positive_int(text: str) -> int:
    """argparse's type for a count or a step: 0 or less would silently mean something else."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


# the commands that write a workspace's results (dvc repro runs them)
WRITE_RESULTS = (
    "conditions", "candidates", "ranker", "select", "train", "evaluate", "study", "report",
    "installed", "resume-point", "audit",
)  # fmt: skip


def refuse_inside_a_bundle(args) -> None:
    """An unpacked bundle's files are the reference a replication is checked against: a
    command that writes results there would change them (or, finding its runs finished,
    seem to replicate them without computing anything)."""
    here = Path.cwd()
    writes = args.command in WRITE_RESULTS or (
        args.command == "start-states" and getattr(args, "out", None) is not None
    )  # import, and which --out: the bundle pipeline's evaluation_states stage
    if writes and workspace.is_unpacked_bundle(here):
        raise InputError(
            f"{here}: an unpacked bundle, whose files are the reference; `reprodqn "
            f"{args.command}` would change them. Check it with `reprodqn verify .`; "
            "replicate in a new workspace beside it (REPLICATE.md gives the commands), "
            "then `reprodqn verify --reference` this folder"
        )


def not_installed(error: ModuleNotFoundError, command: str) -> str:
    """The line for a package the command needs that the light install lacks (the study's
    stack is the `study` extra); a module of reprodqn's own missing is a bug, raised."""
    missing = (error.name or "").split(".")[0]
    if missing in ("", "reprodqn"):
        raise error
    return (
        f"{command} needs {missing}, which is not installed: the study's commands need "
        "pip install 'reprodqn[study]'"
    )
