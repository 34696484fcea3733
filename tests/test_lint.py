"""The tree as `make lint` holds it: ruff's rules (stale `noqa`s included), ruff's format,
and mypy on src/ with pydantic's plugin, each clean; and each check shown to bite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

TREES = ["src", "tests", "bench", "experiments", "tools", "examples", "template"]


def run(*argv: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True)


def test_ruff_finds_nothing_not_even_a_stale_noqa():
    result = run("ruff", "check", *TREES)
    assert result.returncode == 0, result.stdout[-3000:]


def test_the_tree_is_as_ruff_formats_it():
    result = run("ruff", "format", "--check", *TREES)
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_finds_no_error_in_src():
    result = run("mypy")  # files and plugins from pyproject.toml
    assert result.returncode == 0, result.stdout[-3000:]
    assert "no issues found" in result.stdout


@pytest.mark.parametrize(
    "planted, tool",
    [
        ("import os  # noqa: F401\nprint(os.sep)\n", ["ruff", "check"]),  # a stale noqa
        ("x = {'a':1}\n", ["ruff", "format", "--check"]),
    ],
)
def test_the_ruff_checks_bite(tmp_path, planted, tool):
    (tmp_path / "planted.py").write_text(planted)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert run(*tool, "planted.py", cwd=tmp_path).returncode == 1


def test_mypy_bites_with_the_projects_settings(tmp_path):
    """A model field passed as the wrong type is caught: the pydantic plugin is on."""
    (tmp_path / "planted.py").write_text(
        "from reprodqn.config.params import AgentConfig\nAgentConfig(batch_size='32')\n"
    )
    result = run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "planted.py", cwd=tmp_path)
    assert result.returncode == 1 and "batch_size" in result.stdout, result.stdout
