"""exact.setup() watches torch's, numpy's and Python's global generators: a draw from one
between two checkpoints is refused at the second, naming the generator and the stretch,
before anything is written; what the script draws while building itself is not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reprodqn.determinism import isa
from tests.helpers import cli_env

SCRIPT = """
import random, sys
from reprodqn import exact
exact.cpu_floor("portable")
import numpy as np
import torch

def main():
    exact.setup()
    net = torch.nn.Linear(2, 2)  # its default initialisation draws: before the load, allowed
    chain = exact.HashChain("run")
    exact.load_resume_point("run", {"chain": chain})
    chain.checkpoint(0, net)
    draw = {
        "torch": lambda: torch.nn.functional.dropout(torch.ones(3), 0.5),
        "numpy": lambda: np.random.rand(),
        "python": lambda: random.random(),
        "none": lambda: torch.rand(2, generator=torch.Generator().manual_seed(1)),
    }[sys.argv[1]]
    draw()
    chain.extend(1.0)
    chain.checkpoint(10, net)
    exact.save_resume_point("run", 10, {"chain": chain})

exact.main(main)
"""


@pytest.mark.parametrize(
    "draw, named",
    [
        ("torch", "torch's global generator (torch.manual_seed)"),
        ("numpy", "numpy's global generator (np.random.seed)"),
        ("python", "Python's global generator (random.seed)"),
        ("none", None),
    ],
)
def test_a_draw_from_a_global_generator_is_refused_at_the_next_checkpoint(tmp_path, draw, named):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {k: v for k, v in cli_env().items() if k not in isa.KNOBS}
    done = subprocess.run(
        [sys.executable, "train.py", draw], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "hashes.jsonl").open()]
    if named is None:
        assert done.returncode == 0, done.stderr[-2000:]
        assert steps == [0, 10]
        return
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert f"run: checkpoint at step 10: {named} drew (or was reseeded) since " in done.stderr
    assert "since run: checkpoint at step 0" in done.stderr
    assert steps == [0]  # refused before the checkpoint was written


def test_a_layer_built_uninitialised_draws_nothing_and_keeps_its_shapes_and_buffers():
    """exact.uninitialised: torch's skip_init without its sympy import; keyword arguments
    reach the layer, buffers and frozen parameters keep what the layer gave them."""
    import torch

    from reprodqn import exact

    before = torch.get_rng_state()
    conv = exact.uninitialised(torch.nn.Conv2d, 4, 8, 3, stride=2, bias=False)
    norm = exact.uninitialised(torch.nn.BatchNorm1d, 5)
    assert torch.equal(torch.get_rng_state(), before)  # a default initialisation would draw
    assert conv.stride == (2, 2) and conv.bias is None
    assert conv.weight.shape == (8, 4, 3, 3) and conv.weight.device.type == "cpu"
    assert conv.weight.requires_grad and isinstance(conv.weight, torch.nn.Parameter)
    assert norm.running_mean.shape == (5,) and norm.running_mean.device.type == "cpu"
    assert norm.num_batches_tracked.dtype == torch.long
    assert "running_var" in dict(norm.named_buffers())  # still a buffer, in its state_dict
    frozen = exact.uninitialised(torch.nn.Embedding, 3, 2, _freeze=True)
    assert not frozen.weight.requires_grad
