"""Start sequences: drawn from their stream, files that state their units and hash, the
authors' format imported by parsing (never evaluating), ranking and selection."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from reprodqn.config.params import load_params
from reprodqn.core import packaged
from reprodqn.core.atomic import write_json
from reprodqn.core.errors import InputError
from reprodqn.evaluation import ranking, start_states
from tests.helpers import PARAMS, cli_env


@pytest.fixture
def config():
    return load_params(PARAMS).start_states


def test_candidates_follow_the_paper_and_their_stream(config):
    doc = start_states.generate_candidates(config)
    lengths = [len(s) - 2 for s in doc["sequences"]]  # the random part, after two NOOPs
    assert all(s[:2] == [0, 0] for s in doc["sequences"])  # as every line of initstates.txt
    assert doc["count"] == len(lengths) == 1000
    assert min(lengths) == 55 and max(lengths) == 95  # both ends drawn among 1000
    assert {a for s in doc["sequences"] for a in s} == {0, 1, 3, 4}
    assert doc["unit"] == "emulator frame" and doc["ids"] == "raw ALE action id"
    assert doc["provenance"]["seed"] == 123 and "PCG64" in doc["provenance"]["generator"]
    assert start_states.generate_candidates(config) == doc
    other = start_states.generate_candidates(config.model_copy(update={"candidates_seed": 7}))
    assert other["sequences"] != doc["sequences"]


def test_a_written_file_loads_and_each_defect_is_one_clear_line(tmp_path, config):
    doc = start_states.generate_candidates(config.model_copy(update={"candidates": 10}))
    good = tmp_path / "good.json"
    write_json(good, doc)
    assert start_states.load(good, 10)["sequences"] == doc["sequences"]

    def broken(change, name):
        bad = json.loads(json.dumps(doc))
        change(bad)
        path = tmp_path / f"{name}.json"
        write_json(path, bad)
        return path

    cases = {
        "count": (lambda d: None, r"holds 10 sequences, expected 100", 100),
        "unit": (
            lambda d: d.update(unit="agent step"),
            r"unit is 'agent step', expected 'emulator frame'",
            10,
        ),
        "action": (
            lambda d: d["sequences"][3].__setitem__(5, 2),
            r"sequence 3: action 2 is not one of the game's minimal action set",
            10,
        ),
        "hash": (
            lambda d: d["sequences"][0].__setitem__(0, 4 if d["sequences"][0][0] != 4 else 3),
            r"sequences_sha256 does not match",
            10,
        ),
        "empty": (
            lambda d: d["sequences"].__setitem__(1, []),
            r"sequence 1: expected a "
            "non-empty list",
            10,
        ),
    }
    for name, (change, message, count) in cases.items():
        path = broken(change, name)
        with pytest.raises(InputError, match=message) as caught:
            start_states.load(path, count)
        assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


AUTHORS_LINE = "[0, 1, 3, 4, 4, 3, 1, 0, 1, 1, 3, 3, 4, 4, 0, 0, 1, 3, 4, 1, 0, 3, 4, 1, 1]"


def test_import_of_the_authors_format(tmp_path):
    source = tmp_path / "initstates.txt"
    source.write_text("\n".join([AUTHORS_LINE] * 100) + "\n")
    out = tmp_path / "authors.json"
    doc = start_states.import_authors_file(source, out, 100)
    loaded = start_states.load(out, 100)
    assert loaded == doc and loaded["sequences"][0][:4] == [0, 1, 3, 4]
    assert doc["provenance"]["source_sha256"] and doc["unit"] == "emulator frame"


@pytest.mark.parametrize(
    "line, message",
    [
        ("__import__('os').system('true')", "expected a list of integer literals"),
        ("[1, 3, x]", "expected a list of integer literals"),
        ("[1.0, 3]", "expected a list of integer literals"),
        ("[1, -3]", "expected a list of integer literals"),
        ("[1, 2]", "action 2 is not one of the game's minimal action set"),
        ("[]", "expected a non-empty list"),
        ("[1, 3", "not a Python list literal"),
    ],
)
def test_a_malformed_line_is_reported_by_number_and_nothing_is_overwritten(tmp_path, line, message):
    source = tmp_path / "initstates.txt"
    lines = [AUTHORS_LINE] * 100
    lines[41] = line
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "authors.json"
    out.write_text("previous content")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "start-states",
            "import",
            str(source),
            "--out",
            str(out),
            "--params",
            str(PARAMS),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 2
    [error] = result.stderr.splitlines()
    assert error.startswith(f"reprodqn: error: {source}:42: ") and message in error
    assert out.read_text() == "previous content"


def test_import_refuses_the_wrong_count(tmp_path):
    source = tmp_path / "initstates.txt"
    source.write_text("\n".join([AUTHORS_LINE] * 99) + "\n")
    with pytest.raises(InputError, match="holds 99 sequences, expected 100"):
        start_states.parse_authors_file(source, 100)


def test_ranking_and_selection(tmp_path, config):
    small = config.model_copy(update={"candidates": 40, "top_k": 10, "selected": 5})
    candidates = start_states.generate_candidates(small)
    max_q = np.linspace(0, 1, 40, dtype=np.float32)[::-1].copy()
    max_q[7] = max_q[6]  # a tie keeps candidate order
    ranks = ranking.rank(max_q)
    assert ranks[0] == 1 and ranks[6] == 7 and ranks[7] == 8 and ranks[39] == 40
    ranker = {"weights_sha256": "r" * 64, "steps": 400}
    doc, table = ranking.select(candidates, max_q, small, ranker, "c" * 64)
    chosen = doc["provenance"]["candidate_indices"]
    assert len(chosen) == 5 == len(set(chosen)) and all(i < 10 for i in chosen)
    assert doc["sequences"] == [candidates["sequences"][i] for i in chosen]
    assert doc["provenance"]["ranker_weights_sha256"] == "r" * 64
    assert doc["provenance"]["ranker"] == ranker  # its steps and chain travel with the file
    rows = table.splitlines()
    assert rows[0] == "index,length,max_q,rank" and len(rows) == 41
    start_states.write_unless_other(tmp_path / "selected.json", doc, replace=False)
    assert start_states.load(tmp_path / "selected.json", 5) == doc
    assert ranking.select(candidates, max_q, small, ranker, "c" * 64) == (doc, table)


def test_the_shipped_authors_states_are_what_the_importer_makes_of_their_file(tmp_path):
    """start_sequences/authors.json is `reprodqn start-states import` of the authors' text,
    byte for byte, with where it came from; their MIT notice ships beside it."""
    import hashlib
    import json
    import subprocess
    import sys

    from tests.helpers import ROOT, cli_env

    folder = ROOT / "start_sequences"
    shipped = (folder / "authors.json").read_bytes()
    origin = json.loads(shipped)["provenance"]
    text = (folder / "authors-initstates.txt").read_bytes()
    assert (
        hashlib.sha256(text).hexdigest()
        == origin["source_sha256"]
        == ("b0b933f32a8b006ab6c985124933302d112d731bc7b619d409dd8c9ae6dd6975")
    )
    assert origin["repository"] == "https://github.com/prabhatnagarajan/repro_dqn"
    assert origin["commit"].startswith("59b8dfb") and origin["path"] == "files/initstates.txt"
    notice = (ROOT / origin["license"]).read_text()
    assert "MIT License" in notice and "Prabhat Nagarajan" in notice
    out = tmp_path / "authors.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "start-states",
            "import",
            str(folder / "authors-initstates.txt"),
            "--out",
            str(out),
            "--repository",
            origin["repository"],
            "--commit",
            origin["commit"],
            "--path",
            origin["path"],
            "--license",
            origin["license"],
        ],
        check=True,
        capture_output=True,
        env=cli_env(),
        cwd=ROOT,
    )
    assert out.read_bytes() == shipped
    doc = start_states.load(folder / "authors.json", at_least=100)
    assert all(s[:2] == [0, 0] for s in doc["sequences"])  # their two NOOP frames


def test_import_keeps_an_existing_file_with_other_provenance_unless_replaced(tmp_path):
    """Without --out the importer would overwrite the shipped authors.json and lose where
    it came from: a file with other contents is kept, with one line, unless --replace."""
    from tests.helpers import ROOT

    folder = ROOT / "start_sequences"
    out = tmp_path / "authors.json"
    out.write_bytes((folder / "authors.json").read_bytes())
    with pytest.raises(InputError, match="exists with other contents"):
        start_states.import_authors_file(folder / "authors-initstates.txt", out, 100)
    assert out.read_bytes() == (folder / "authors.json").read_bytes()
    origin = json.loads(out.read_text())["provenance"]
    start_states.import_authors_file(folder / "authors-initstates.txt", out, 100, origin)
    assert out.read_bytes() == (folder / "authors.json").read_bytes()  # same: no refusal
    start_states.import_authors_file(folder / "authors-initstates.txt", out, 100, replace=True)
    assert "repository" not in json.loads(out.read_text())["provenance"]


def test_another_games_candidates_draw_its_own_minimal_actions_and_stay_its_own(tmp_path, config):
    small = config.model_copy(update={"candidates": 50})
    pong = start_states.generate_candidates(small, "pong")
    assert pong["game"] == "pong" and pong["action_set"] == [0, 1, 3, 4, 11, 12]
    assert {a for s in pong["sequences"] for a in s[2:]} == {0, 1, 3, 4, 11, 12}
    breakout = start_states.generate_candidates(small)  # the draws Breakout always had
    assert [len(s) for s in pong["sequences"]] == [len(s) for s in breakout["sequences"]]
    path = tmp_path / "pong.json"
    write_json(path, pong)
    doc = start_states.load(path)  # its own action set is what its sequences are checked on
    start_states.check_game(doc, path, "pong")
    with pytest.raises(
        InputError, match="start states of 'pong', but env.game is 'breakout'"
    ) as refused:
        start_states.check_game(doc, path, "breakout")
    # the remedy, as params name it (not a path into this installation)
    assert f"evaluation.start_sequences: {packaged.DEFAULT_START_SEQUENCES}," in str(refused.value)
    selected, _ = ranking.select(
        pong, np.arange(50.0), small.model_copy(update={"top_k": 20, "selected": 5}),
        {"weights_sha256": "r"}, "c",
    )  # fmt: skip
    assert selected["game"] == "pong" and selected["action_set"] == pong["action_set"]


def study(*overrides: str):
    from reprodqn.config.params import resolve_run

    params = load_params(PARAMS, list(overrides))
    return params.evaluation, [resolve_run(params, g, r) for g, r in params.study.run_ids()]


def test_a_studys_start_states_are_checked_before_training_where_it_will_use_them():
    ours = "evaluation.start_sequences=start_sequences/pong.json"
    assert start_states.check_before_training(*study("env.game=pong", ours)) == []
    for game in ("breakout", "seaquest"):  # another game's file, named: refused, as before
        with pytest.raises(InputError, match=f"start states of 'pong', but env.game is '{game}'"):
            start_states.check_before_training(*study(f"env.game={game}", ours))
    sticky = ("env.game=seaquest", ours, "env.sticky_p=0.25")  # no start states used
    assert start_states.check_before_training(*study(*sticky)) == []
    # a stage's own file may be remade (select) before evaluation, which checks it then
    stages = "evaluation.start_sequences=start_sequences/selected.json"
    assert start_states.check_before_training(*study("env.game=pong", stages)) == []


def test_the_game_alone_decides_its_start_states():
    """`--set env.game=pong` alone was refused, as params.yaml names Breakout's states, and a
    game without packaged ones until evaluation.start_sequences=none was added (issue 72,
    item 7): the default follows the game, and no-op starts are said in one line."""
    assert start_states.check_before_training(*study("env.game=pong")) == []
    assert start_states.check_before_training(*study()) == []
    notes = start_states.check_before_training(*study("env.game=seaquest"))
    assert len(notes) == 1
    assert "no start states for seaquest" in notes[0] and "after 1..30 no-ops" in notes[0]
    chosen = ("env.game=seaquest", "evaluation.start_sequences=none")  # chosen: nothing to say
    assert start_states.check_before_training(*study(*chosen)) == []


@pytest.mark.parametrize(
    ("game", "expected"),
    [
        ("breakout", packaged.DEFAULT_START_SEQUENCES),
        ("pong", "start_sequences/pong.json"),
        ("seaquest", start_states.NONE),
    ],
)
def test_the_evaluation_of_a_game_plays_its_own_start_states_by_default(game, expected):
    from reprodqn.evaluation.stage import protocol_episodes

    evaluation, configs = study(f"env.game={game}")
    *_, used = protocol_episodes(configs[0], evaluation, None)
    if expected == start_states.NONE:
        assert used == start_states.no_start_states(30)
    else:
        assert used["file"] == str(packaged.start_sequences(expected))
        assert (
            used["sequences_sha256"]
            == start_states.load(packaged.start_sequences(expected))["sequences_sha256"]
        )


def test_the_candidates_line_tells_the_noop_prefix_from_the_papers_random_lengths(tmp_path):
    """It said "57-97 frames" where the paper says 55-95, without the 2-NOOP prefix."""
    out = tmp_path / "candidates.json"
    argv = [sys.executable, "-m", "reprodqn.cli", "candidates", "--params", str(PARAMS)]
    done = subprocess.run(
        [*argv, "--out", str(out)],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "1000 sequences, 2 NOOP frames then 55-95 random ones (57-97 in all)" in done.stderr
