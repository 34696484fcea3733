"""REPLICATE.md followed as a reader would, from the archive alone: the smoke study's bundle
(reference/smoke/, bundled as a workspace) unpacked in an empty folder, its install
commands run in a fresh venv outside the checkout (torch's pin from the local CPU wheel,
as CI has no CUDA), then its check (`verify reprodqn-bundle`) and its one-run spot-check
(`verify --rerun`) with the installed reprodqn. Run by CI with the wheel test (`-m wheel`:
the lock's distributions come from a package index)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from reprodqn.report import bundle
from tests.e2e.test_wheel import TORCH_WHEEL, TORCH_WHEELS
from tests.helpers import ROOT, cli_env

pytestmark = pytest.mark.wheel


def shell_blocks(page: str) -> list[list[str]]:
    """Each ```sh block of the page, as its command lines (comments dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", page, re.S)
    return [
        [line.split("   #")[0].split("  #")[0].strip() for line in block.splitlines() if line]
        for block in blocks
    ]


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    """An empty folder holding only the unpacked archive."""
    if not (TORCH_WHEELS / TORCH_WHEEL).is_file():
        pytest.skip(f"no local torch wheel {TORCH_WHEELS / TORCH_WHEEL}")
    base = tmp_path_factory.mktemp("made")
    study = shutil.copytree(
        ROOT / "reference" / "smoke", base / "study", ignore=shutil.ignore_patterns(bundle.MANIFEST)
    )
    shutil.copy(ROOT / "CITATION.cff", study / "CITATION.cff")
    archive = base / "bundle.tar.gz"
    bundle.write(study, archive, checkpoints=False)
    folder = tmp_path_factory.mktemp("reader")
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def run(folder: Path, line: str) -> subprocess.CompletedProcess:
    """One command line of the page, in bash, with the fresh venv active where made."""
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    activate = ". .venv/bin/activate && " if (folder / ".venv").exists() else ""
    return subprocess.run(
        ["bash", "-c", activate + line], cwd=folder, capture_output=True, text=True, env=env
    )


def test_replicate_md_installs_checks_and_spot_checks_from_the_archive_alone(reader):
    page = (reader / bundle.ROOT / "REPLICATE.md").read_text()
    check, install, _, spot = shell_blocks(page)
    assert check[0].startswith("reprodqn verify reprodqn-bundle")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for line in install:
        if line.startswith("pip install torch=="):  # the pin, from the local CPU build
            assert line == "pip install torch==2.13.0"
            line = f"pip install {TORCH_WHEELS / TORCH_WHEEL}"
        line = line.replace("python3.11", f"python{python}")
        done = run(reader, line)
        assert done.returncode == 0, f"{line}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    where = run(reader, "python -c 'import reprodqn; print(reprodqn.__file__)'")
    assert Path(where.stdout.strip()).is_relative_to(reader / ".venv")
    checked = run(reader, check[0])
    assert checked.returncode == 0 and checked.stdout.startswith("verify: consistent")
    line = spot[0].replace("../reprodqn-bundle", "reprodqn-bundle").replace("STEP", "1000")
    spotted = run(reader, line)
    assert spotted.returncode == 0, spotted.stdout + spotted.stderr
    assert spotted.stdout.startswith("verify: identical: deterministic/0 retrained")
