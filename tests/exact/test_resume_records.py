"""A resume refuses records changed since its point was saved, in one line naming the file
(issue 70's cases 8 and 11): a chain line with a flipped byte, a latest.json naming a
folder that is not there, a run folder written by another script."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from reprodqn import exact
from reprodqn.core.errors import InputError
from reprodqn.determinism import run_folder
from tests.exact.test_resume_rules import _begin, _files, _process, _resume


@pytest.fixture(autouse=True)
def _let_the_folders_go():
    yield
    for held in list(run_folder._HELD):
        run_folder.release(held)


def _parts(run):
    """The parts _begin saved, the log before the chain: restored first, it would be cut
    back before the chain's refusal unless every check runs before any restore."""
    return {
        "net": torch.nn.Linear(2, 2),
        "log": exact.JsonLog(run / "log.jsonl"),
        "chain": exact.HashChain(run),
        "counts": np.zeros(3),
    }


def _flip_in_line(path, number, at=30):
    """One byte of line `number` (1-based) changed, the file as long as before."""
    lines = path.read_bytes().splitlines(keepends=True)
    line = bytearray(lines[number - 1])
    line[at] = ord("0") if line[at] != ord("0") else ord("1")
    lines[number - 1] = bytes(line)
    path.write_bytes(b"".join(lines))


def test_a_chain_line_changed_before_the_point_is_refused_naming_the_file_and_line(
    tmp_path, monkeypatch
):
    """The point at step 2 holds the chain's first line; a byte flipped there was accepted,
    the run wrote on after it, and verify then found the checkpoint not its line's."""
    run = tmp_path / "run"
    _begin(run, monkeypatch)
    hashes = run / "hashes.jsonl"
    _flip_in_line(hashes, 1)
    before = _files(run)
    with pytest.raises(InputError) as error:
        _resume(run, monkeypatch, _process(), _parts(run))
    assert str(error.value).startswith(
        f"{hashes}: line 1 is not as the resume point recorded it (changed since"
    )
    run_folder.release(run)
    assert _files(run) == before  # nothing cut back, nothing rewritten
    _flip_in_line(hashes, 2)  # a line after the point: cut off and written again, as ever
    _flip_in_line(hashes, 1)  # back as it was (the same byte flipped twice)
    assert _resume(run, monkeypatch, _process(), _parts(run))["counts"].shape == (3,)


def test_a_chain_cut_shorter_than_its_point_is_refused(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _begin(run, monkeypatch)
    hashes = run / "hashes.jsonl"
    hashes.write_bytes(hashes.read_bytes()[:10])
    with pytest.raises(InputError, match=r"hashes\.jsonl: 10 bytes, fewer than the \d+ the"):
        _resume(run, monkeypatch, _process(), _parts(run))


def test_a_latest_json_naming_a_folder_not_there_names_latest_json(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _begin(run, monkeypatch)
    latest = run / "resume" / "latest.json"
    index = json.loads(latest.read_text())
    index["directory"] = "step-000000003"  # one flipped digit of step-000000002
    latest.write_text(json.dumps(index))
    with pytest.raises(InputError) as error:
        _resume(run, monkeypatch, _process(), _parts(run))
    assert str(error.value).startswith(
        f"{latest}: names the point folder 'step-000000003', which {run / 'resume'} does not "
        "hold (its folders: step-000000002)"
    )  # not "learner.safetensors: missing from the resume point"


def test_a_folder_written_by_another_script_names_both_scripts(tmp_path, monkeypatch):
    first, second = tmp_path / "train.py", tmp_path / "evaluate.py"
    first.write_text("A = 1\n")
    second.write_text("B = 2\n")
    run = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [str(first), "--out", str(run)])
    exact.start_run(run, {"lr": 0.1}, _process())
    run_folder.release(run)
    monkeypatch.setattr(sys, "argv", [str(second), "--out", str(run)])
    with pytest.raises(InputError) as error:
        exact.start_run(run, {"lr": 0.1}, _process())
    assert str(error.value).startswith(
        f"{run}: holds a run written by another script, {first} (this process runs {second}"
    )
    assert "another version of" not in str(error.value)
    run_folder.release(run)
    first.write_text("A = 2\n")  # the same script, changed: another version of it
    monkeypatch.setattr(sys, "argv", [str(first), "--out", str(run)])
    with pytest.raises(InputError, match=r"another version of .*train\.py"):
        exact.start_run(run, {"lr": 0.1}, _process())


def test_a_module_of_the_script_changed_is_refused_by_name(tmp_path, monkeypatch):
    """The script's own modules (a models.py beside it) are recorded with it: a resume
    by the same script importing a changed one would mix two codes."""
    import importlib.util

    script, helper = tmp_path / "train.py", tmp_path / "reprodqn_test_models.py"
    script.write_text("import reprodqn_test_models\n")
    helper.write_text("WIDTH = 64\n")
    spec = importlib.util.spec_from_file_location("reprodqn_test_models", helper)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "reprodqn_test_models", module)  # as the script imports it
    interpreter = tmp_path / "env" / "lib" / "python3.11"  # a conda env beside the script
    interpreter.mkdir(parents=True)
    (interpreter / "reprodqn_test_stdlib.py").write_text("X = 1\n")
    spec = importlib.util.spec_from_file_location(
        "reprodqn_test_stdlib", interpreter / "reprodqn_test_stdlib.py"
    )
    monkeypatch.setitem(sys.modules, "reprodqn_test_stdlib", importlib.util.module_from_spec(spec))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    run = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(run)])
    exact.start_run(run, {"lr": 0.1}, _process())
    code = json.loads((run / "config.json").read_text())["code_sha256"]
    assert set(code) == {"train.py", "reprodqn_test_models.py"}  # not the interpreter's
    net, chain = torch.nn.Linear(2, 2), exact.HashChain(run)
    chain.checkpoint(0, net)
    exact.save_resume_point(run, 2, {"net": net, "chain": chain, "step": 2})
    run_folder.release(run)
    monkeypatch.delitem(sys.modules, "reprodqn_test_models")  # not imported yet this time
    exact.start_run(run, {"lr": 0.1}, _process())  # the same code: resumed
    exact.load_resume_point(run, {"net": net, "chain": chain, "step": 0})
    assert json.loads((run / "config.json").read_text())["code_sha256"] == code  # kept
    run_folder.release(run)
    monkeypatch.setitem(sys.modules, "reprodqn_test_models", module)
    helper.write_text("WIDTH = 128\n")
    with pytest.raises(InputError, match=r"another version of reprodqn_test_models\.py, a module"):
        exact.start_run(run, {"lr": 0.1}, _process())
