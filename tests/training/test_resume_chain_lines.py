"""reprodqn's own training refuses to resume after a chain line before its resume point
changed (issue 70's case 8): a flipped byte in hashes.jsonl's last line was accepted, the
run went on after it, and verify later found a checkpoint that was not its line's."""

from __future__ import annotations

import json

import pytest

from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from tests.helpers import PARAMS, TINY, stop_after_first_resume_point, train_tiny


def test_a_changed_chain_line_refuses_the_resume_and_nothing_is_cut(tmp_path):
    params = load_params(PARAMS, TINY)
    run_dir = tmp_path / "run"
    stop_after_first_resume_point(params, run_dir)
    hashes = run_dir / "hashes.jsonl"
    lines = hashes.read_text().splitlines()
    last = json.loads(lines[-1])
    digest = last["weights_sha256"]  # a digit past the 12 a message shows
    last["weights_sha256"] = digest[:20] + ("0" if digest[20] != "0" else "1") + digest[21:]
    hashes.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")
    before = hashes.read_bytes()
    with pytest.raises(InputError, match=rf"hashes\.jsonl: line {len(lines)} is not as the resume"):
        train_tiny(params, run_dir)
    assert hashes.read_bytes() == before
