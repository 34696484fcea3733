"""A kill leaves nothing that a later run or verify must step around: the resumed run's
start clears the temporary files of atomic writes, a resume point's staging folder and
points no index names, and its chain drops the checkpoints past the point it resumed."""

from __future__ import annotations

from reprodqn import exact
from reprodqn.determinism import run_folder
from tests.exact.test_resume_rules import _begin, _let_the_folders_go, _process, _resume

__all__ = ["_let_the_folders_go"]  # the fixture that lets the folders go after each test


def test_a_resumed_run_clears_what_kills_left_half_made(tmp_path, monkeypatch):
    run = tmp_path / "run"
    parts = _begin(run, monkeypatch)  # killed after a checkpoint past its point at step 2
    planted = [
        run / ".config.json.k3j2.tmp",  # atomic_open's temporary files, killed before rename
        run / "checkpoints" / ".step-000000004.safetensors.a8x1.tmp",
        run / "resume" / ".latest.json.q0w9.tmp",
        run / "resume" / ".step-000000005.partial" / "state.json",  # a point being written
        run / "resume" / "step-000000001" / "state.json",  # one the index no longer names
    ]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert (run / "checkpoints" / "step-000000003.safetensors").exists()
    assert _resume(run, monkeypatch, _process(), parts) is not None
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.name != ".lock")
    assert left == [
        "checkpoints",
        "checkpoints/step-000000000.safetensors",
        "conditions.json",
        "config.json",
        "determinism.json",
        "hashes.jsonl",
        "log.jsonl",
        "resume",
        "resume/latest.json",
        "resume/step-000000002",
        "resume/step-000000002/counts.npy",
        "resume/step-000000002/learner.safetensors",
        "resume/step-000000002/state.json",
        "sbom.cdx.json",
    ]
    run_folder.release(run)
    exact.start_run(run, {"lr": 0.1}, _process())  # nothing left to clear
    assert run_folder.clear_leftovers(run) == []
