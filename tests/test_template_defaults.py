"""The template's defaults install reprodqn from where the study was made: the checkout's
absolute path (file://) or its repository's URL (git+), so a study made with `copier copy
--defaults` needs no index that hosts reprodqn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def made_from(source: str, tmp_path: Path) -> str:
    copier = Path(sys.executable).parent / "copier"
    project = tmp_path / "study"
    made = subprocess.run(
        [copier, "copy", "--defaults", "--vcs-ref", "HEAD", source, str(project)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr[-1500:]
    line = next(
        row
        for row in (project / "Makefile").read_text().splitlines()
        if row.startswith("REPRODQN ?=")
    )
    return line.split("?=", 1)[1].strip()


def test_a_study_made_from_a_checkout_installs_reprodqn_from_it(tmp_path):
    assert made_from(str(ROOT), tmp_path) == f"reprodqn @ file://{ROOT}"
