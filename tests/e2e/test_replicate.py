"""REPLICATE.md followed as a reader would, from the archive alone, through the replication
and its verdict. An author makes a tiny study (the smoke params with only the
deterministic group's two runs, 1,000 steps, two evaluation episodes) in a workspace:
`reprodqn init`, `dvc repro`, `reprodqn bundle`. A reader unpacks the archive in an empty
folder and runs the page's commands as written: the install in a fresh venv outside the
checkout (torch's pin from the local CPU wheel, as CI has no CUDA), the check (`verify
reprodqn-bundle`), the replication (`reprodqn init`, the bundle's params, `dvc repro`)
and its `verify --reference`, then the one-run spot-check (`verify --rerun`), all with
the installed reprodqn. Run by CI with the wheel test (`-m wheel`: the lock's
distributions come from a package index); 2.5 to 4 minutes on 2 shared cores.

"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from reprodqn.forensics import bundle_check
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


def tiny_params() -> dict:
    """The smoke study's params at the smallest scale that still learns: one group's two
    runs, 500 steps of updates, two checkpoints after step 0."""
    params = yaml.safe_load((ROOT / "reference" / "smoke" / "params.yaml").read_text())
    params["study"]["left_out"] = [g for g in params["study"]["groups"] if g != "deterministic"]
    params["train"].update(steps=1000, checkpoint_every=500, resume_every=1000, log_every=250)
    params["replay"]["learning_starts"] = 500
    params["agent"].update(target_sync_every=250, epsilon_decay_steps=1000)
    params["evaluation"].update(episodes=2, max_frames=500)
    return params


def author(base: Path, line: str) -> None:
    """One of the author's commands, with this checkout's reprodqn."""
    done = subprocess.run(
        ["bash", "-c", line], cwd=base, capture_output=True, text=True,
        env=cli_env(DVC_NO_ANALYTICS="1"),
    )  # fmt: skip
    assert done.returncode == 0, f"{line}: {done.stdout[-1500:]}{done.stderr[-1500:]}"


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    """An empty folder holding only the unpacked archive of the author's tiny study."""
    if not (TORCH_WHEELS / TORCH_WHEEL).is_file():
        pytest.skip(f"no local torch wheel {TORCH_WHEELS / TORCH_WHEEL}")
    base = tmp_path_factory.mktemp("made")
    author(base, "reprodqn init study")
    (base / "study" / "params.yaml").write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    author(base / "study", "dvc repro")
    author(base / "study", "reprodqn bundle --out ../bundle.tar.gz")
    folder = tmp_path_factory.mktemp("reader")
    with tarfile.open(base / "bundle.tar.gz") as tar:
        tar.extractall(folder, filter="data")
    return folder


def archive_of(reader: Path) -> Path:
    """The archive the reader unpacked (the author's folder, beside the reader's)."""
    return next(reader.parent.glob("made*/bundle.tar.gz"))


def run(folder: Path, line: str) -> subprocess.CompletedProcess:
    """One command line of the page, in bash, with the fresh venv active where made."""
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    # pip byte-compiles every module it installs (torch's 5,000): 70% of an install's CPU
    # here. Left to import time, the same packages are installed, in a third of the time.
    env["PIP_COMPILE"] = "0"
    venv = next((d / ".venv" for d in (folder, *folder.parents) if (d / ".venv").is_dir()), None)
    activate = f". {venv}/bin/activate && " if venv is not None else ""
    return subprocess.run(
        ["bash", "-c", activate + line], cwd=folder, capture_output=True, text=True, env=env
    )


def test_replicate_md_installs_checks_replicates_and_verifies_from_the_archive_alone(reader):
    page = (reader / bundle.ROOT / "REPLICATE.md").read_text()
    trust, install, check, replicate, spot = shell_blocks(page)
    assert check[0].startswith("reprodqn verify reprodqn-bundle")
    # step 1, with the reader's own tools, before anything from the archive is installed
    archive = archive_of(reader)
    published = archive.with_name(archive.name + ".sha256").read_text().split()[0]
    step = "set -e\n" + "\n".join(trust).replace("ARCHIVE", str(archive))
    trusted = run(reader, step)
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert trusted.stdout.split()[0] == published  # sha256sum ARCHIVE, then nothing more
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
    assert "checked by the bundle's own wheel" in checked.stdout  # which cannot vouch for it
    # step 3 as one shell session, as a reader types it: its `cd` holds for the next line
    replicated = run(reader, "set -e\n" + "\n".join(replicate))
    assert replicated.returncode == 0, replicated.stdout[-3000:] + replicated.stderr[-3000:]
    verdict = [line for line in replicated.stdout.splitlines() if line.startswith("verify:")]
    assert len(verdict) == 1, replicated.stdout[-3000:]
    assert verdict[0].startswith("verify: identical: 2 runs, every weight and loss chain")
    assert (reader / "replication" / "reports" / "table1.csv").read_bytes() == (
        reader / bundle.ROOT / "reports" / "table1.csv"
    ).read_bytes()
    assert bundle_check.check(reader / bundle.ROOT)["ok"]  # the replication wrote no file there
    spotted = run(reader, spot[0].replace("STEP", "1000"))  # step 4: from step 2's folder
    assert spotted.returncode == 0, spotted.stdout + spotted.stderr
    assert spotted.stdout.startswith("verify: identical: deterministic/0 retrained")
