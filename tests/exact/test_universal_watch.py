"""A run is labelled universal only if it is (issue 70, case 1): exact.setup(numerics=
"universal") with torch's own layers ran and labelled every chain line universal, since
only code inside universal.strict() was watched. The watch now covers the whole process
from setup on: torch's kernels are refused wherever they would compute floats, parameters
still holding torch's initial draw are refused at a checkpoint, and the parts a script
declares outside (universal.outside) neither learn nor go unrecorded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from reprodqn import exact
from reprodqn.determinism import run_folder
from reprodqn.exact import universal
from reprodqn.universal import guard, record
from tests.helpers import ROOT

TORCH_LAYERS = """
import sys
from reprodqn import exact

def main():
    process = exact.setup(threads=1, numerics="universal")
    import torch
    out = sys.argv[1]
    exact.start_run(out, {"lr": 0.1}, process)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    chain = exact.HashChain(out, "universal")
    exact.load_resume_point(out, {"model": model, "chain": chain})
    x = torch.arange(6, dtype=torch.float32).view(2, 3)
    for step in range(1, 3):
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        chain.extend(loss)
        chain.checkpoint(step, model)

exact.main(main)
"""


def test_torch_layers_under_a_universal_setup_are_refused_and_no_line_is_labelled(tmp_path):
    """The tester's shape: torch's layers and optimizer, no strict(), a universal chain."""
    script, run = tmp_path / "train.py", tmp_path / "run"
    script.write_text(TORCH_LAYERS)
    env = {"PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(script), str(run)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert "torch's aten.addmm would compute floats" in message
    assert "universal.outside" in message  # where a part that neither acts nor learns goes
    assert not (run / "hashes.jsonl").exists()


@pytest.fixture
def watched(tmp_path, monkeypatch):
    """A run started in the universal numerics, the whole process watched from there."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--out", str(tmp_path / "run")])
    monkeypatch.setattr(record, "_SET_UP", ["universal"])
    process = exact.Setup(torch.device("cpu"), 1, "portable", True, numerics="universal")
    exact.start_run(tmp_path / "run", {"lr": 0.1}, process)
    guard.watch_process()
    try:
        yield tmp_path / "run"
    finally:
        guard.stop_watching_process()
        for held in list(run_folder._HELD):
            run_folder.release(held)


def test_weights_still_holding_torchs_initial_draw_are_refused_at_a_checkpoint(watched):
    """Built under the watch, a layer's default initialisation is torch's draw on torch's
    kernels: refused at a checkpoint, naming the parameters, until replaced."""
    net = torch.nn.Sequential(universal.Linear(3, 4), universal.ReLU(), universal.Linear(4, 2))
    chain = exact.HashChain(watched, "universal")
    with pytest.raises(universal.NumericsError) as refused:
        chain.checkpoint(0, net)
    assert "0.weight, 0.bias, 2.weight, 2.bias still hold torch's initial draw" in str(
        refused.value
    )
    universal.init_(net[0], torch.Generator().manual_seed(1))
    with pytest.raises(universal.NumericsError, match=r"^\S+: checkpoint at step 0: 2\.weight"):
        chain.checkpoint(0, net)
    net[2].load_state_dict({"weight": torch.zeros(2, 4), "bias": torch.zeros(2)})
    line = chain.checkpoint(0, net)
    assert line["numerics"] == "universal"


def test_a_declared_part_runs_torchs_kernels_never_learns_and_is_recorded(watched):
    net = torch.nn.Sequential(universal.Linear(3, 2))
    universal.init_(net, torch.Generator().manual_seed(1))
    x = torch.ones(2, 3)
    with pytest.raises(universal.NumericsError, match=r"aten\.tanh"):
        torch.tanh(x)  # outside any strict(): the process is watched
    with universal.outside("logging"):
        assert torch.tanh(x).shape == (2, 3)  # the script's word: neither acts nor learns
        with pytest.raises(universal.NumericsError, match="gradients in the declared part"):
            torch.nn.functional.linear(x, net[0].weight)
        with torch.no_grad():
            torch.nn.functional.linear(x, net[0].weight)
    exact.HashChain(watched, "universal").checkpoint(0, net)
    conditions = json.loads((watched / "conditions.json").read_text())
    assert conditions["universal_outside"] == ["logging"]


def test_a_chain_labelled_universal_in_a_process_set_up_standard_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(record, "_SET_UP", ["standard"])
    with pytest.raises(universal.NumericsError, match="in a process set up standard"):
        exact.HashChain(tmp_path, "universal")
    assert "numerics" not in exact.HashChain(tmp_path).checkpoint(0, {"w": torch.zeros(1)})
