"""Atomic writes leave a file with the mode a plain open() gives it, not mkstemp's 0o600:
a study's results stay readable by whoever the umask lets read them (a lab's group, the
image's user reading what its build wrote)."""

from __future__ import annotations

import os
import stat

import pytest

from reprodqn.core.atomic import umask, write_text


@pytest.fixture
def set_umask():
    kept = os.umask(0o022)
    os.umask(kept)
    yield os.umask
    os.umask(kept)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_a_new_file_gets_the_umasks_mode(tmp_path, set_umask, mask):
    set_umask(mask)
    assert umask() == mask
    write_text(tmp_path / "results.json", "{}\n")
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == 0o666 & ~mask


def test_a_replaced_file_keeps_its_own_mode(tmp_path, set_umask):
    set_umask(0o022)
    kept = tmp_path / "private.json"
    kept.write_text("old\n")
    kept.chmod(0o600)
    write_text(kept, "new\n")
    assert kept.read_text() == "new\n" and stat.S_IMODE(kept.stat().st_mode) == 0o600
