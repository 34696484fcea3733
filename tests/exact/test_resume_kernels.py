"""A resume that changes which kernels run is refused naming both, as another thread count
is (issue 70's case 5): torch.compile switched on (or off) for a resume only, outside the
config, was accepted with no word, and verify then found a difference with no cause. Each
resume point and the run's conditions record the kernel settings."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from reprodqn import exact
from reprodqn.core.errors import InputError
from reprodqn.determinism import kernel_settings, run_folder
from tests.exact.test_resume_rules import _files, _process

COMPILED = "on (inductor, mode default)"


@pytest.fixture(autouse=True)
def _one_process_at_a_time(monkeypatch):
    """Each phase of a test is a process of its own: no compile call seen yet."""
    monkeypatch.setattr(kernel_settings, "_CALLS", [])
    yield
    for held in list(run_folder._HELD):
        run_folder.release(held)


def _new_process(monkeypatch) -> None:
    monkeypatch.setattr(kernel_settings, "_CALLS", [])


def _parts(run) -> dict:
    return {
        "net": torch.nn.Linear(2, 2),
        "chain": exact.HashChain(run),
        "log": exact.JsonLog(run / "log.jsonl"),
        "counts": np.zeros(3),
    }


def _begin(run, monkeypatch, compiled: bool) -> None:
    """A run to a resume point at step 2 and a checkpoint after it, then killed."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--out", str(run)])
    exact.start_run(run, {"lr": 0.1}, _process())
    parts = _parts(run)
    if compiled:
        torch.compile(parts["net"])  # compiles at the first call: the call is what counts
    parts["chain"].checkpoint(0, parts["net"])
    exact.save_resume_point(run, 2, parts | {"step": 2})
    parts["chain"].checkpoint(3, parts["net"])
    run_folder.release(run)
    _new_process(monkeypatch)


def _start_again(run, monkeypatch) -> dict:
    monkeypatch.setattr(sys, "argv", ["train.py", "--out", str(run), "--resumed"])
    exact.start_run(run, {"lr": 0.1}, _process())
    return _parts(run)


def test_the_run_records_its_kernels_in_its_conditions_and_resume_points(tmp_path, monkeypatch):
    """A compile called after start_run is in the conditions by the first checkpoint."""
    run = tmp_path / "run"
    _begin(run, monkeypatch, compiled=True)
    conditions = json.loads((run / "conditions.json").read_text())
    assert conditions["kernels"]["torch_compile"] == ["inductor, mode default"]
    assert conditions["kernels"]["torch_threads"] == torch.get_num_threads()
    point = json.loads((run / "resume" / "latest.json").read_text())
    assert point["kernels"] == conditions["kernels"]


def test_compile_switched_on_for_a_resume_is_refused_at_loading_naming_both(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _begin(run, monkeypatch, compiled=False)
    before = _files(run)
    parts = _start_again(run, monkeypatch)
    torch.compile(parts["net"])
    with pytest.raises(InputError, match="with other kernels") as refused:
        exact.load_resume_point(run, parts)
    message = str(refused.value)
    assert f'torch.compile (the run had "off", this process has {COMPILED})' in message
    assert "\n" not in message and "step 2" in message
    assert _files(run) == before  # refused before anything was restored or recorded


def test_compile_called_after_loading_is_refused_at_the_first_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _begin(run, monkeypatch, compiled=False)
    parts = _start_again(run, monkeypatch)
    exact.load_resume_point(run, parts)
    lines = (run / "hashes.jsonl").read_text()
    parts["net"].compile(backend="eager")  # nn.Module.compile calls torch.compile too
    with pytest.raises(InputError, match="with other kernels") as refused:
        parts["chain"].checkpoint(3, parts["net"])
    assert "this process has on (eager, mode default)" in str(refused.value)
    assert (run / "hashes.jsonl").read_text() == lines  # no line written past the refusal


def test_compile_left_out_of_a_resume_is_refused_and_the_same_compile_resumes(
    tmp_path, monkeypatch
):
    run = tmp_path / "run"
    _begin(run, monkeypatch, compiled=True)
    parts = _start_again(run, monkeypatch)
    exact.load_resume_point(run, parts)  # the script may compile after loading: not yet known
    with pytest.raises(InputError) as refused:
        exact.save_resume_point(run, 3, parts | {"step": 3})
    assert f'torch.compile (the run had {COMPILED}, this process has "off")' in str(refused.value)
    run_folder.release(run)
    _new_process(monkeypatch)
    parts = _start_again(run, monkeypatch)
    torch.compile(parts["net"])  # as the run began
    assert exact.load_resume_point(run, parts)["step"] == 2
    exact.save_resume_point(run, 3, parts | {"step": 3})


def test_a_thread_count_changed_after_setup_is_refused_at_the_first_checkpoint(
    tmp_path, monkeypatch
):
    """setup() records the count it applied; a script's own torch.set_num_threads after
    it changed the kernels' sums with no record saying so."""
    run = tmp_path / "run"
    _begin(run, monkeypatch, compiled=False)
    parts = _start_again(run, monkeypatch)
    exact.load_resume_point(run, parts)
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        with pytest.raises(InputError) as refused:
            parts["chain"].checkpoint(3, parts["net"])
    finally:
        torch.set_num_threads(threads)
    assert f"torch threads (the run had {threads}, this process has {threads + 1})" in str(
        refused.value
    )
