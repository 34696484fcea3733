"""Start sequences: the paper's evaluation starts each episode from its own state, reached
by replaying a fixed sequence of actions on a freshly reset game.

Generation (paper supplement): 1000 random sequences of 55-95 actions; rank their end
states by max_a Q(s, a) of a trained DQN; draw 100 from the top 250. One entry is one
emulator frame, a raw ALE action id, as in the authors' code and their shipped file.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np

from reprodqn.core import packaged
from reprodqn.core.atomic import read_json, write_json
from reprodqn.core.digests import json_digest, sha256_file
from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import GENERATOR, stream

FORMAT = "reprodqn-start-sequences/1"
UNIT = "emulator frame"
IDS = "raw ALE action id"
BREAKOUT_ACTIONS = (0, 1, 3, 4)  # NOOP, FIRE, RIGHT, LEFT


def sequences_sha256(sequences: list[list[int]]) -> str:
    return json_digest(sequences)


def document(
    sequences: list[list[int]],
    provenance: dict,
    game: str = "breakout",
    action_set: tuple[int, ...] = BREAKOUT_ACTIONS,
) -> dict:
    """The start-sequence file: its game and units stated, its content hashed."""
    return {
        "format": FORMAT,
        "game": game,
        "unit": UNIT,
        "ids": IDS,
        "action_set": list(action_set),
        "count": len(sequences),
        "sequences_sha256": sequences_sha256(sequences),
        "provenance": provenance,
        "sequences": sequences,
    }


def load(path: Path, expected_count: int | None = None, at_least: int | None = None) -> dict:
    """Read and check a start-sequence file; every problem is one line naming the file."""
    path = Path(path)
    doc = read_json(path, "start-sequence file")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(
            f"{path}: not a start-sequence file (expected format {FORMAT!r}; "
            "the authors' initstates.txt goes through `reprodqn start-states "
            "import`)"
        )
    if doc.get("unit") != UNIT:
        raise InputError(f"{path}: unit is {doc.get('unit')!r}, expected {UNIT!r}")
    if doc.get("ids") != IDS:
        raise InputError(f"{path}: ids are {doc.get('ids')!r}, expected {IDS!r}")
    sequences = doc.get("sequences")
    if not isinstance(sequences, list):
        raise InputError(f"{path}: 'sequences' must be a list of action lists")
    action_set = doc.get("action_set", BREAKOUT_ACTIONS)
    if not isinstance(action_set, list) or not all(type(a) is int for a in action_set):
        raise InputError(f"{path}: 'action_set' must be a list of ALE action ids")
    for number, sequence in enumerate(sequences):
        check_sequence(sequence, f"{path}: sequence {number}", tuple(action_set))
    if doc.get("count") != len(sequences):
        raise InputError(f"{path}: count says {doc.get('count')}, file holds {len(sequences)}")
    if expected_count is not None and len(sequences) != expected_count:
        raise InputError(f"{path}: holds {len(sequences)} sequences, expected {expected_count}")
    if at_least is not None and len(sequences) < at_least:
        raise InputError(
            f"{path}: holds {len(sequences)} sequences, fewer than the "
            f"{at_least} evaluation episodes"
        )
    actual = sequences_sha256(sequences)
    if doc.get("sequences_sha256") != actual:
        raise InputError(
            f"{path}: sequences_sha256 does not match the sequences (edited or corrupted)"
        )
    return doc


NONE = "none"  # evaluation.start_sequences: no start states (not the paper's protocol)


def no_start_states(noop_max: int) -> dict:
    """What an evaluation without start states records in place of a file's summary."""
    return {
        "file": NONE,
        "count": 0,
        "sequences_sha256": None,
        "provenance": {"stage": NONE, "noop_max": noop_max},
        "protocol": "not the paper's: each episode starts at the reset screen after "
        f"1..{noop_max} no-op frames drawn from its own seed",
    }


def score_note(used: dict | None) -> str:
    """What a line giving a score adds when its episodes began with no-ops, not start
    states (`used`: the start states' summary an evaluation records)."""
    if used is None or used.get("file") != NONE:
        return ""
    return " from no-op starts (no start states: not the paper's protocol)"


def mean_score(mean: float, used: dict | None) -> str:
    """A score line's words: the mean score, and its no-op starts where it had them."""
    return f"mean score {mean:.2f}{score_note(used)}"


def summary(doc: dict, path: Path) -> dict:
    """What an evaluation records of the start states it used, and the report prints."""
    keep = (
        "stage",
        "repository",
        "commit",
        "path",
        "source_sha256",
        "ranker_weights_sha256",
        "selection_seed",
    )
    return {
        "file": str(path),
        "count": doc["count"],
        "sequences_sha256": doc["sequences_sha256"],
        "provenance": {k: v for k, v in doc["provenance"].items() if k in keep},
    }


def describe(used: dict) -> str:
    """One line: which start states, from where, with which hashes."""
    p = used["provenance"]
    if p.get("stage") == NONE:
        return f"none: {used['protocol']}"
    if p.get("stage") == "import":
        origin = (
            f"the authors' states, imported from {p.get('repository', 'a file')} "
            f"{p.get('path', '')} at {str(p.get('commit', '?'))[:7]} (file SHA-256 "
            f"{p.get('source_sha256', '?')[:12]}…)"
        )
    else:
        origin = (
            f"our draw by the paper's method (ranker weights "
            f"{str(p.get('ranker_weights_sha256', '?'))[:12]}…, selection seed "
            f"{p.get('selection_seed', '?')})"
        )
    return (
        f"`{used['file']}`: {used['count']} sequences, {origin}; sequences SHA-256 "
        f"{used['sequences_sha256'][:12]}…"
    )


def check_sequence(sequence, where: str, action_set: tuple[int, ...] = BREAKOUT_ACTIONS) -> None:
    if not isinstance(sequence, list) or not sequence:
        raise InputError(f"{where}: expected a non-empty list of action ids")
    for action in sequence:
        if type(action) is not int or action not in action_set:
            raise InputError(
                f"{where}: action {action!r} is not one of the game's minimal "
                f"action set {list(action_set)}"
            )


def check_game(doc: dict, path: Path, game: str, door: str = "params") -> None:
    """Start states are a game's own: replayed on another game they mean nothing. The
    remedy is said as `door` takes it: "params" (evaluation.start_sequences), "env" (the
    Gymnasium env's start_sequences=) or "select" (its candidates file)."""
    theirs = doc.get("game", "breakout")
    if theirs == game:
        return
    shipped = packaged.game_start_sequences_name(game)
    make = f"make {game}'s with `reprodqn candidates`, `ranker` and `select`"
    whose = "the package's" if packaged.carries(shipped or NONE) else "its own"
    if door == "select":
        remedy = f"select for their game: --set env.game={theirs}; or `reprodqn candidates`"
        raise InputError(f"{path}: candidates of {theirs!r}, but env.game is {game!r} ({remedy})")
    if door == "env":
        own = f"leave start_sequences unset for the package's, {shipped}" if shipped else make
        remedy, none = own, "or pass start_sequences='none'"
        said = f"this env's game is {game!r}"
    else:
        own = f"evaluate with {whose} for {game}: evaluation.start_sequences: {shipped}"
        remedy, none = own if shipped else make, "or set evaluation.start_sequences: none"
        said = f"env.game is {game!r}"
    raise InputError(f"{path}: start states of {theirs!r}, but {said} ({remedy}, {none})")


def for_game(evaluation, game: str, root: Path = Path(".")) -> str:
    """The start states a run or policy of `game` is evaluated on when no file is named on
    the command line: params' evaluation.start_sequences; where that is the package's
    default (Breakout's), it follows the game: its start_sequences/GAME.json, the package's
    or the workspace `root`'s (`reprodqn select` makes one), or none for a game with
    neither (as the game's Gymnasium env chooses). A file named in its place is the game's
    own or refused (check_game)."""
    chosen = str(evaluation.start_sequences)
    if chosen != packaged.DEFAULT_START_SEQUENCES or game == "breakout":
        return chosen
    return packaged.game_start_sequences_name(game, root) or NONE


def played(evaluation, env, root: Path = Path(".")) -> dict:
    """What the study's evaluation plays, by content: the game, the file params name or the
    game's own (for_game), its count and sequences' SHA-256. The evaluate stage depends on
    this record, not on a path: the file follows env.game and may be the workspace's or
    the package's, so no path in dvc.yaml can say which one changed."""
    chosen = for_game(evaluation, env.game, root)
    if chosen == NONE:
        return {"game": env.game, "start_sequences": NONE, "noop_max": env.noop_max}
    own = Path(root) / chosen
    path = own if own.is_file() else packaged.start_sequences(chosen)  # as every door finds it
    doc = load(path, at_least=evaluation.episodes)
    check_game(doc, path, env.game)
    return {
        "game": env.game,
        "start_sequences": chosen,
        "from": "workspace" if path == own else "package",
        "count": doc["count"],
        "sequences_sha256": doc["sequences_sha256"],
    }


def noop_starts_note(game: str, noop_max: int) -> str:
    """What is said when the default leaves a game without start states (for_game)."""
    return (
        f"evaluation.start_sequences: no start states for {game} (none in the package, no "
        f"start_sequences/{game}.json here), so its evaluation starts each episode after "
        f"1..{noop_max} no-ops (not the paper's protocol; `reprodqn candidates`, `ranker` "
        f"and `select` with --set env.game={game} make its own)"
    )


def check_before_training(evaluation, configs) -> list[str]:
    """A study's evaluation states, where they are a file the package carries (Breakout's,
    another game's start_sequences/GAME.json), are its game's own for every run that
    evaluates from start states (not sticky): a study evaluated on another game's states
    would otherwise train for days before its evaluation refused them. A file a stage
    makes (select's) may be remade before evaluation, and is checked then. Returns the
    lines to say: each game the default leaves with no-op starts."""
    notes = []
    for config in sorted(
        {c.env.game: c for c in configs if c.env.sticky_p == 0}.values(), key=lambda c: c.env.game
    ):
        game, chosen = config.env.game, for_game(evaluation, config.env.game)
        if chosen == NONE and evaluation.start_sequences != NONE:
            notes.append(noop_starts_note(game, config.env.noop_max))
        if not packaged.carries(chosen):
            continue
        path = packaged.start_sequences(chosen)
        check_game(load(path), path, game)
    return notes


# ---------------------------------------------------------------------------------------------
# Candidates


def generate_candidates(config, game: str = "breakout") -> dict:
    """`config.candidates` sequences; each: `noop_prefix` NOOP frames (as every line of the
    authors' file begins), then a length uniform in [min, max] and that many actions
    uniform over the minimal action set, all from the candidates stream."""
    from reprodqn.training.atari import NOOP, minimal_action_set

    rng = stream(config.candidates_seed)
    action_set = minimal_action_set(game)
    actions = np.array(action_set)
    prefix = [NOOP] * config.noop_prefix
    sequences = []
    for _ in range(config.candidates):
        length = int(rng.integers(config.min_length, config.max_length + 1))
        sequences.append(prefix + [int(a) for a in actions[rng.integers(0, len(actions), length)]])
    return document(
        sequences,
        {
            "stage": "candidates",
            "generator": GENERATOR,
            "stream": "candidates",
            "seed": config.candidates_seed,
            "noop_prefix": config.noop_prefix,
            "length_range": [config.min_length, config.max_length],
            "draws": "per sequence: noop_prefix NOOPs, then length = integers(min, max + 1), "
            f"then actions = action_set[integers(0, {len(action_set)}, length)]",
        },
        game,
        action_set,
    )


# ---------------------------------------------------------------------------------------------
# Import of the authors' format


def parse_authors_file(path: Path, expected_count: int) -> list[list[int]]:
    """repro_dqn's files/initstates.txt: one Python list literal of ALE ids per line.
    Parsed as syntax, never evaluated: only a list of non-negative integer literals passes."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    sequences = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            node = ast.parse(line.strip(), mode="eval").body
        except SyntaxError:
            raise InputError(f"{where}: not a Python list literal") from None
        if not isinstance(node, ast.List) or not all(
            isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts
        ):
            raise InputError(f"{where}: expected a list of integer literals like [1, 3, 4]")
        sequence = [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, int)
        ]
        check_sequence(sequence, where)
        sequences.append(sequence)
    if len(sequences) != expected_count:
        raise InputError(f"{path}: holds {len(sequences)} sequences, expected {expected_count}")
    return sequences


def import_authors_file(
    source: Path,
    out: Path,
    expected_count: int,
    origin: dict[str, str] | None = None,
    replace: bool = False,
) -> dict:
    """Convert the authors' format into a start-sequence file; `origin` says where the text
    came from (repository, commit, path, license), recorded beside its SHA-256. An existing
    `out` with other contents (the shipped authors.json and its provenance, say) is kept
    unless `replace`."""
    sequences = parse_authors_file(source, expected_count)
    doc = document(
        sequences,
        {
            "stage": "import",
            "source": Path(source).name,
            "source_sha256": sha256_file(source),
            "source_format": (
                "repro_dqn files/initstates.txt (one list literal of ALE ids per line)"
            ),
            **{key: value for key, value in (origin or {}).items() if value is not None},
        },
    )
    write_unless_other(Path(out), doc, replace)
    return doc


def write_unless_other(out: Path, doc: dict, replace: bool) -> None:
    """Write a start-sequence file, keeping one already there with other contents (the
    shipped authors.json, a game's start states the package carries, an earlier draw)
    unless `replace`: a file a study was evaluated on is not changed by a second command."""
    if out.exists() and not replace:
        try:
            same = json.loads(out.read_text()) == doc
        except (OSError, ValueError):
            same = False
        if not same:
            raise InputError(
                f"{out}: exists with other contents (its sequences or "
                "provenance); write elsewhere with --out, or --replace it"
            )
    write_json(out, doc)
