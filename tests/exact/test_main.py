"""exact.main: a script's refusals as one line and exit 2, as reprodqn's commands give
them; a bug keeps its traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import cli_env

SCRIPT = """
import sys
from reprodqn import exact

def main():
    if sys.argv[1] == "refused":
        exact.Streams(numpy={"a": 1}, torch={"a": 2})
    if sys.argv[1] == "bug":
        raise ZeroDivisionError("a bug")
    if sys.argv[1] == "code":
        return 4

exact.main(main)
"""


@pytest.mark.parametrize(
    "case, code, stderr",
    [
        (
            "refused",
            2,
            "train.py: error: streams ['a']: named as both a numpy and a torch stream\n",
        ),
        ("fine", 0, ""),
        ("code", 4, ""),
    ],
)
def test_a_refusal_in_a_script_is_one_line_and_exit_2(tmp_path, case, code, stderr):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "train.py", case],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr) == (code, stderr)


def test_a_bug_keeps_its_traceback(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "train.py", "bug"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode == 1 and "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr
    )
