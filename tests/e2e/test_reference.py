"""The committed reference study replicates on this machine: `reference/smoke/` (the smoke
study's results without code, checkpoints or resume points, made by `make smoke-reference`)
must match its MANIFEST.sha256 file by file, and deterministic/0 retrained here must give
its hash chain and process records (`reprodqn verify --reference ... --rerun`). So every
machine that runs the tests checks a whole committed study, not only the golden run; and a
tampered reference fails with verify's one screen."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprodqn.report.bundle import MANIFEST, manifest_text
from tests.helpers import ROOT, cli_env

REFERENCE = ROOT / "reference" / "smoke"
SPOT_CHECK_UNTIL = 3000  # the smoke run's end: updates from step 1000, a checkpoint every 1000


def verify(reference: Path, scratch: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", "verify", "--reference", str(reference),
         "--rerun", "deterministic/0", "--until", str(SPOT_CHECK_UNTIL),
         "--scratch", str(scratch)],
        capture_output=True, text=True, env=cli_env(), cwd=scratch.parent)


def tampered_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "reference"
    shutil.copytree(REFERENCE, copy)
    return copy


def test_the_committed_reference_replicates_here(tmp_path):
    result = verify(REFERENCE, tmp_path / "rerun")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical" in result.stdout + result.stderr


def test_a_file_altered_against_the_manifest_is_named_in_one_line(tmp_path):
    copy = tampered_copy(tmp_path)
    target = copy / "evaluations" / "deterministic" / "0" / "eval.csv"
    target.write_text(target.read_text().replace(",", ";", 1))
    result = verify(copy, tmp_path / "rerun")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "evaluations/deterministic/0/eval.csv" in lines[0]
    assert MANIFEST in lines[0] and "Traceback" not in result.stderr


def test_a_chain_altered_with_its_manifest_fails_the_spot_check(tmp_path):
    copy = tampered_copy(tmp_path)
    chain = copy / "runs" / "deterministic" / "0" / "hashes.jsonl"
    lines = chain.read_text().splitlines()
    lines[-1] = lines[-1].replace(lines[-1][-66:-2], "0" * 64)  # the last weights hash
    chain.write_text("\n".join(lines) + "\n")
    from reprodqn.core.digests import sha256_file

    names = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*")
                   if p.is_file() and p.name != MANIFEST)
    (copy / MANIFEST).write_text(manifest_text({n: sha256_file(copy / n) for n in names}))
    result = verify(copy, tmp_path / "rerun")
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "DIFFERENT" in output and "weights_sha256" in output


@pytest.fixture(autouse=True)
def _reference_exists():
    assert (REFERENCE / MANIFEST).exists(), f"{REFERENCE}: make smoke-reference writes it"
