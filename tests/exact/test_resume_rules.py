"""reprodqn.exact's resume refuses what would not resume exactly, and writes nothing when it
refuses: another process on the folder, other process settings or conditions, parts that
are not the ones saved; and a resume point gives back every value with its type."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from reprodqn import exact
from reprodqn.core.errors import InputError
from reprodqn.determinism import run_folder
from tests.helpers import cli_env


@pytest.fixture(autouse=True)
def _let_the_folders_go():
    """start_run holds a folder for the rest of the process: this one is pytest's."""
    yield
    for held in list(run_folder._HELD):
        run_folder.release(held)


def _process(threads: int = 1, floor: str = "portable") -> exact.Setup:
    return exact.Setup(torch.device("cpu"), threads, floor, True)


def _begin(run: Path, monkeypatch, process: exact.Setup | None = None) -> dict:
    """A run as a script starts it: start_run, its parts, a point at step 2, and a chain
    and a log that went on past it (a killed run's)."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--out", str(run)])
    exact.start_run(run, {"lr": 0.1}, process or _process())
    net = torch.nn.Linear(2, 2)
    chain, log = exact.HashChain(run), exact.JsonLog(run / "log.jsonl")
    parts = {"net": net, "chain": chain, "log": log, "counts": np.zeros(3)}
    chain.checkpoint(0, net)
    log.write({"step": 1})
    exact.save_resume_point(run, 2, parts | {"step": 2})
    chain.extend(1.0)
    chain.checkpoint(3, net)
    log.write({"step": 3})
    run_folder.release(run)  # the process ends
    return parts


def _files(run: Path) -> dict[str, bytes]:
    """Every record (the lock file only names its holder)."""
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in run.rglob("*")
        if p.is_file() and p.name != ".lock"
    }


def _resume(run: Path, monkeypatch, process: exact.Setup, parts: dict) -> dict | None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--out", str(run), "--resumed"])
    exact.start_run(run, {"lr": 0.1}, process)
    return exact.load_resume_point(run, parts)


def test_a_refused_resume_leaves_every_file_as_it_was(tmp_path, monkeypatch):
    """No config.json rewritten with the new command, no log or chain cut back."""
    run = tmp_path / "run"
    parts = _begin(run, monkeypatch)
    before = _files(run)
    for wrong in (
        {**parts, "counts": np.zeros(4)},  # a buffer of another shape
        {k: v for k, v in parts.items() if k != "log"},  # a part left out
    ):
        with pytest.raises(InputError):
            _resume(run, monkeypatch, _process(), wrong)
        run_folder.release(run)
        assert _files(run) == before
    saved = _resume(run, monkeypatch, _process(), parts)
    assert saved is not None and saved["step"] == 2
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["command"]["arguments"][-1] == "--resumed"  # written once it passed
    assert len((run / "hashes.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    "began, now, named",
    [
        (_process(threads=1), _process(threads=2), "threads (began with 1, this process has 2)"),
        (
            _process(floor="portable"),
            _process(floor="avx512"),
            'cpu floor (began with "portable", this process has "avx512")',
        ),
    ],
)
def test_a_resume_with_other_process_settings_is_refused_naming_both_values(
    tmp_path, monkeypatch, began, now, named
):
    """The config does not hold them: the run's own record does."""
    run = tmp_path / "run"
    parts = _begin(run, monkeypatch, began)
    before = _files(run)
    with pytest.raises(InputError, match="with other process settings") as refused:
        _resume(run, monkeypatch, now, parts)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert _files(run) == before
    conditions = json.loads((run / "conditions.json").read_text())
    assert conditions["numerics"]["cpu_isa"] == began.cpu_isa  # the run's first segment


@pytest.mark.parametrize(
    "recorded, named",
    [
        ({"device": "cuda:0"}, 'device (began with "cuda", this process has "cpu")'),
        (
            {"numerics": {"numerics": "universal", "numerics_spec": "1"}},
            'numerics (began with "universal", this process has "standard")',
        ),
    ],
)
def test_a_resume_on_another_device_or_numerics_mode_is_refused(
    tmp_path, monkeypatch, recorded, named
):
    run = tmp_path / "run"
    parts = _begin(run, monkeypatch)
    conditions = json.loads((run / "conditions.json").read_text())
    for key, value in recorded.items():
        conditions[key] = {**conditions[key], **value} if isinstance(value, dict) else value
    (run / "conditions.json").write_text(json.dumps(conditions))
    with pytest.raises(InputError, match="with other process settings") as refused:
        _resume(run, monkeypatch, _process(), parts)
    assert named in str(refused.value)


def test_another_torch_is_refused_unless_forced_and_then_recorded_per_segment(
    tmp_path, monkeypatch
):
    run = tmp_path / "run"
    parts = _begin(run, monkeypatch)
    conditions = json.loads((run / "conditions.json").read_text())
    conditions["packages"]["torch"] = "2.0.0"  # the run began under another torch
    (run / "conditions.json").write_text(json.dumps(conditions))
    with pytest.raises(InputError, match="on other conditions: packages.torch") as refused:
        _resume(run, monkeypatch, _process(), parts)
    assert "REPRODQN_FORCE_RESUME=1" in str(refused.value)
    run_folder.release(run)
    monkeypatch.setenv(run_folder.FORCE_ENV, "1")
    assert _resume(run, monkeypatch, _process(), parts) is not None
    recorded = json.loads((run / "conditions.json").read_text())
    assert recorded["packages"]["torch"] == "2.0.0"  # the first segment's, kept
    (segment,) = recorded[run_folder.SEGMENTS]
    assert segment["from_step"] == 2 and segment["differs"][0].startswith("packages.torch")
    assert segment["conditions"]["packages"]["torch"] == torch.__version__.split("+")[0] or (
        segment["conditions"]["packages"]["torch"] != "2.0.0"
    )


def test_a_run_that_starts_over_may_change_its_settings(tmp_path, monkeypatch):
    """No resume point: nothing of the old run is carried on, so nothing to refuse."""
    run = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["train.py"])
    exact.start_run(run, {"lr": 0.1}, _process(threads=1))
    run_folder.release(run)
    exact.start_run(run, {"lr": 0.1}, _process(threads=2))
    conditions = json.loads((run / "conditions.json").read_text())
    assert conditions["numerics"]["torch_threads"] == 2


HOLDER = """
import sys, time
import torch
from reprodqn import exact
exact.start_run(sys.argv[1], {"lr": 0.1}, exact.Setup(torch.device("cpu"), 1, "portable", True))
print("holding", flush=True)
time.sleep(120)
"""


def test_a_second_process_on_a_run_folder_is_refused_at_once_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(InputError, match=rf"is being written by pid {holder.pid} on ") as no:
            exact.start_run(run, {"lr": 0.1}, _process())
        assert "\n" not in str(no.value)
    finally:
        holder.kill()
        holder.wait()
    exact.start_run(run, {"lr": 0.1}, _process())  # the kernel let it go with the process


class Colour(enum.IntEnum):
    RED = 1


def _every_numpy_scalar() -> dict:
    kinds = [np.bool_(True), np.longdouble(1) / 3, np.clongdouble(1 + 2j) / 3]
    kinds += [np.dtype(code).type(7) for code in "bBhHiIlLqQ"]
    kinds += [np.float16(0.1), np.float32(0.1), np.float64(0.1), np.complex64(0.1 + 1j)]
    kinds += [np.complex128(0.1j), np.datetime64("2025-01-02T03:04", "s")]
    kinds += [np.timedelta64(5, "ms"), np.str_("ab"), np.bytes_(b"ab"), np.void(b"\x01\x02")]
    kinds += [np.array((1, 2.5), dtype=[("a", "<i4"), ("b", "<f8", (1,))])[()]]
    return {f"{index}-{type(v).__name__}": v for index, v in enumerate(kinds)}


def _same(a, b) -> bool:
    """Equal in type, dtype, device and bits, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
    if isinstance(a, np.generic | np.ndarray):
        if a.dtype.char in "gG":  # x87's 80 bits in 16 bytes: the padding is not the value
            return a.dtype == b.dtype and a == b
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b or (a != a and b != b)  # NaN is itself


def test_a_resume_point_gives_back_every_value_with_its_type_and_dtype(tmp_path):
    values = {
        "numpy": _every_numpy_scalar(),
        "zero_d": (np.array(np.float32(0.1)), np.array(3, np.int16)),
        "nested": [{"a": (1, [np.float32(2.5), 0.1]), "b": None}, (), [], b"\x00"],
        "python": [True, 2**70, -0.0, float("nan"), float("inf"), "é"],
        "tensors": {
            "half": torch.tensor([0.1], dtype=torch.float16),
            "brain": torch.tensor([0.1], dtype=torch.bfloat16),
            "ints": torch.arange(3, dtype=torch.uint8),
            "scalar": torch.tensor(2.5, dtype=torch.float64),
        },
    }
    exact.save_resume_point(tmp_path, 1, {"values": values})
    saved = exact.load_resume_point(tmp_path, {})
    assert saved is not None and _same(saved["values"], values)
    assert type(saved["values"]["numpy"]["14-float32"]) is np.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_tensor_comes_back_on_the_device_it_was_saved_on(tmp_path):
    values = {"on_gpu": torch.ones(2, device="cuda"), "on_cpu": torch.ones(2)}
    exact.save_resume_point(tmp_path, 1, {"values": values})
    saved = exact.load_resume_point(tmp_path, {})
    assert saved is not None and _same(saved["values"], values)


@pytest.mark.parametrize(
    "value, named",
    [
        (np.array([object()]), "an array of Python objects"),
        (np.ma.masked_array([1.0], mask=[True]), "type MaskedArray"),
        (Colour.RED, "type Colour"),
        ({1, 2}, "type set"),
        (torch.zeros(2, dtype=torch.complex128), "dtype torch.complex128"),
        (torch.zeros(2, 2).to_sparse(), "torch.sparse_coo"),
    ],
)
def test_what_cannot_come_back_as_it_was_is_refused_at_save_in_one_line(tmp_path, value, named):
    with pytest.raises(InputError, match=r"^values\.bad: a value of type") as refused:
        exact.save_resume_point(tmp_path / "run", 1, {"values": {"bad": value}})
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_the_parts_asked_for_are_the_parts_saved(tmp_path):
    """An object saved and not asked for would be dropped without a word; plain values
    may be read from what load returns."""
    net, log = torch.nn.Linear(2, 2), exact.JsonLog(tmp_path / "returns.jsonl")
    exact.save_resume_point(tmp_path, 1, {"net": net, "log": log, "step": 1})
    with pytest.raises(InputError, match=r"holds \['log'\], which this run does not ask for"):
        exact.load_resume_point(tmp_path, {"net": net})
    with pytest.raises(InputError, match=r"no state for \['optimizer'\]"):
        exact.load_resume_point(tmp_path, {"net": net, "log": log, "optimizer": net})
    with pytest.raises(InputError, match=r"\['step'\] were saved as plain values"):
        exact.load_resume_point(tmp_path, {"net": net, "log": log, "step": log})
    saved = exact.load_resume_point(tmp_path, {"net": net, "log": log})
    assert saved is not None and saved["step"] == 1
