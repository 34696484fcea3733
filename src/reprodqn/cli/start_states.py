"""`reprodqn candidates`, `ranker` and `select`: the paper's start-state method, a game's
start states in three commands, each with --set env.game=GAME. Every file is the game's own
(workspace.start_state_files): another game's start_sequences/GAME.json, which that game's
training and evaluation then play; Breakout's as its DVC stages name them."""

from __future__ import annotations

import sys
from pathlib import Path

from reprodqn.cli.common import load as _load
from reprodqn.cli.common import stage as _stage
from reprodqn.core import workspace
from reprodqn.core.errors import InputError


def _files(params) -> workspace.StartStateFiles:
    return workspace.start_state_files(params.env.game)


def cmd_candidates(args) -> int:
    from reprodqn.core.atomic import write_json
    from reprodqn.evaluation import start_states

    params = _load(args)
    out = args.out or _files(params).candidates
    doc = start_states.generate_candidates(params.start_states, params.env.game)
    write_json(out, doc)
    lengths, prefix = [len(s) for s in doc["sequences"]], params.start_states.noop_prefix
    print(  # the paper's lengths count the random part; ours begin with the NOOP prefix too
        f"candidates: {doc['count']} sequences, {prefix} NOOP frames then "
        f"{min(lengths) - prefix}-{max(lengths) - prefix} random ones "
        f"({min(lengths)}-{max(lengths)} in all) -> {out}",
        file=sys.stderr,
    )
    return 0


def cmd_ranker(args) -> int:
    from reprodqn.evaluation.ranking import prepare_ranker

    params = _load(args)
    out = args.out or _files(params).ranker
    record = prepare_ranker(params, out, args.restart)
    print(
        f"ranker: {params.env.game}, weights {record['weights_sha256'][:12]} -> "
        f"{out / workspace.RANKER_WEIGHTS}",
        file=sys.stderr,
    )
    return 0


def cmd_select(args) -> int:
    from reprodqn.core.atomic import write_text
    from reprodqn.core.digests import sha256_file
    from reprodqn.evaluation import ranking, start_states

    params = _load(args)
    files, game = _files(params), params.env.game
    candidates_path = args.candidates or _made_before(files.candidates, "candidates", game)
    ranker = args.ranker or _made_before(files.ranker / workspace.RANKER_WEIGHTS, "ranker", game)
    out, ranking_out = args.out or files.selected, args.ranking or files.ranking
    candidates = start_states.load(candidates_path, params.start_states.candidates)
    start_states.check_game(candidates, candidates_path, game, "select")
    record = ranking.ranker_record(ranker, game)
    max_q, _ = ranking.max_q_of_end_states(ranker, candidates["sequences"], params)
    doc, table = ranking.select(
        candidates, max_q, params.start_states, record, sha256_file(candidates_path)
    )
    start_states.write_unless_other(Path(out), doc, args.replace)
    write_text(ranking_out, table)
    print(
        f"select: ranked {len(max_q)} end states by max-Q, kept {doc['count']} of the top "
        f"{params.start_states.top_k} -> {out}",
        file=sys.stderr,
    )
    return 0


def _made_before(path: Path, command: str, game: str) -> Path:
    """A file an earlier command makes, or one line naming that command."""
    if not path.exists():
        raise InputError(
            f"{path}: not made yet; run `reprodqn {command} --set env.game={game}` first"
        )
    return path


def add_commands(sub) -> None:
    """The start sequences: candidates, ranker, selection."""
    default = "default: the game's own (start_sequences/GAME-...; Breakout's: %s)"
    p = _stage(sub, "candidates", "draw the random start-sequence candidates", cmd_candidates)
    p.add_argument("--out", type=Path, default=None, help=default % workspace.CANDIDATES)
    p = _stage(sub, "ranker", "train the ranking DQN (or adopt ranker.checkpoint)", cmd_ranker)
    p.add_argument(
        "--out", type=Path, default=None, help="default: ranker-GAME/ (Breakout's: ranker/)"
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard a ranker there of another game or other params",
    )
    p = _stage(sub, "select", "rank candidates by the ranker's max-Q, draw the 100", cmd_select)
    p.add_argument("--candidates", type=Path, default=None, help=default % workspace.CANDIDATES)
    p.add_argument(
        "--ranker",
        type=Path,
        default=None,
        help=f"default: ranker-GAME/{workspace.RANKER_WEIGHTS} (Breakout's: ranker/)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"default: start_sequences/GAME.json (Breakout's: {workspace.SELECTED})",
    )
    p.add_argument("--ranking", type=Path, default=None, help=default % workspace.RANKING)
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace an --out file holding other start states",
    )
