"""What a script's start costs: the SBOM is made once per environment and linked into
every run folder after that, and setup() sets deterministic algorithms without importing
torch's compiler (torch._dynamo: 1-2 s at every start). Times are bench/startup.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from reprodqn import exact
from reprodqn.determinism import run_folder, sbom
from tests.helpers import ROOT, cli_env


@pytest.fixture
def made(tmp_path, monkeypatch) -> list[int]:
    """An environment with nothing kept yet, whose SBOM generator counts its calls."""
    calls: list[int] = []

    def cyclonedx() -> dict:
        calls.append(1)
        return {"bomFormat": "CycloneDX", "components": [{"name": f"made {len(calls)}"}]}

    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sbom, "sbom_document", cyclonedx)
    return calls


def start(run, config=None) -> None:
    exact.start_run(run, config or {"lr": 0.1}, exact.Setup(torch.device("cpu"), 1, "native", True))
    run_folder.release(run)


def test_the_sbom_is_made_once_per_environment_and_linked_into_each_run(tmp_path, made):
    start(tmp_path / "a")
    start(tmp_path / "b", {"lr": 0.2})
    assert len(made) == 1  # the second start read what the first kept
    kept = list((tmp_path / "cache" / "reprodqn" / "sbom").glob("*.json"))
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o222 == 0  # read-only: links share it
    for run in ("a", "b"):
        in_run = tmp_path / run / "sbom.cdx.json"
        assert os.path.samefile(in_run, kept[0])  # a hard link, not a copy
        assert json.loads(in_run.read_text())["components"] == [{"name": "made 1"}]


def test_a_changed_environment_makes_its_own_sbom(tmp_path, made, monkeypatch):
    start(tmp_path / "a")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "site")])
    (tmp_path / "site" / "newpkg-1.0.dist-info").mkdir(parents=True)  # a package installed
    start(tmp_path / "b")
    assert len(made) == 2
    assert len(list((tmp_path / "cache" / "reprodqn" / "sbom").glob("*.json"))) == 2
    assert json.loads((tmp_path / "b" / "sbom.cdx.json").read_text())["components"] == [
        {"name": "made 2"}
    ]
    (tmp_path / "site" / "newpkg-1.0.dist-info").rename(tmp_path / "site" / "newpkg-1.1.dist-info")
    start(tmp_path / "c")  # upgraded: another environment again
    assert len(made) == 3


def test_a_run_folder_on_another_filesystem_or_without_a_cache_gets_a_copy(tmp_path, made):
    (tmp_path / "cache").write_text("not a folder")  # the cache cannot be written
    start(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "sbom.cdx.json").read_text())["components"] == [
        {"name": "made 1"}
    ]


def test_setup_makes_torch_deterministic_without_importing_its_compiler():
    check = (
        "import sys\n"
        "from reprodqn import exact\n"
        "exact.setup()\n"
        "import torch\n"
        "assert 'torch._dynamo' not in sys.modules, 'setup imported torch._dynamo'\n"
        "assert torch.are_deterministic_algorithms_enabled()\n"
        "import torch._inductor.config as inductor\n"
        "assert inductor.deterministic  # what torch.use_deterministic_algorithms sets\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], env=cli_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_universal_run_imports_neither_torchs_compiler_nor_sympy(tmp_path):
    """A universal run builds its network without torch's skip_init (whose move off the
    meta device imports sympy, 0.8 s) and its optimizer's state_dict, load_state_dict,
    zero_grad and add_param_group skip torch's _disable_dynamo (which imports
    torch._dynamo, 1.3 s, at the first call)."""
    check = (
        "import sys\n"
        "from pathlib import Path\n"
        "import torch\n"
        "from reprodqn.config.params import load_params\n"
        "from reprodqn.exact import uninitialised\n"
        "from reprodqn.universal import optim\n"
        "from tests.helpers import PARAMS, TINY, train_tiny\n"
        "train_tiny(load_params(PARAMS, [*TINY, 'train.steps=300']), Path(sys.argv[1]))\n"
        "layer = uninitialised(torch.nn.Linear, 2, 2)\n"
        "uninitialised(torch.nn.Conv2d, 4, 8, 3, stride=2)\n"
        "uninitialised(torch.nn.BatchNorm1d, 5)\n"
        "for kind in (optim.RMSprop, optim.CenteredRMSprop):\n"
        "    optimizer = kind(layer.parameters(), lr=0.1, alpha=0.9, eps=0.01)\n"
        "    optimizer.zero_grad()\n"
        "    optimizer.load_state_dict(optimizer.state_dict())\n"
        "optimizer = optim.Adam(layer.parameters(), lr=0.1, betas=(0.9, 0.99), eps=0.01)\n"
        "optimizer.load_state_dict(optimizer.state_dict())\n"
        "print(sorted({'torch._dynamo', 'sympy'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "run")],
        env=cli_env(),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "[]"
