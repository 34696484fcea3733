"""tools/emulated: the probe's FMA chains give their recorded hashes here, and (slow) on
qemu's Nehalem and on qemu's aarch64; run.sh refuses bad usage in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tools.emulated import probe

RUN = ROOT / "tools" / "emulated" / "run.sh"
ARM64_ROOT = Path(os.environ.get("REPRODQN_ARM64_ROOT", ROOT.parent / "emu-root" / "arm64"))


def test_the_chains_give_their_recorded_hashes_on_this_cpu(capsys):
    assert probe.main() == 0
    assert "chains all as recorded" in capsys.readouterr().out


def test_the_probe_fails_when_a_chain_gives_other_bits(capsys, monkeypatch):
    monkeypatch.setitem(probe.RECORDED, "mul_add", "0" * 64)
    assert probe.main() == 1
    assert "chains DIFFER: mul_add" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sparc", "/nowhere", "--", "python", "-V"], "unknown target 'sparc'"),
        (["aarch64", "/nowhere", "--", "python", "-V"], "no arm64 root at /nowhere"),
        (["nehalem", "/nowhere", "--", "python", "-V"], "no x86-64 venv at /nowhere"),
        (["nehalem", sys.prefix, "--", "ls"], "must start with python, not 'ls'"),
        (["nehalem", sys.prefix, "python", "-V"], "usage:"),
    ],
)
def test_run_refuses_bad_usage_in_one_line(argv, message):
    result = subprocess.run(["bash", str(RUN), *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def run_probe(target: str, root: Path) -> dict[str, str]:
    command = ["bash", str(RUN), target, str(root), "--", "python", "tools/emulated/probe.py"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("qemu-x86_64-static"), reason="no qemu-user-static")
def test_an_emulated_nehalem_gives_the_recorded_chains():
    lines = run_probe("nehalem", Path(sys.prefix))
    assert lines["numba_cpu"] == "nehalem"  # qemu's CPU, not this one
    assert lines["numba_features"] == "sse4.2"  # no AVX, no FMA: fma is libm's fmaf
    assert "fmaf call" in lines["fma_vector_asm"]
    assert lines["torch"].endswith("capability DEFAULT")
    assert lines["chains"] == "all as recorded"


@pytest.mark.slow
@pytest.mark.skipif(
    not (ARM64_ROOT / "usr/bin/python3.11").exists(),
    reason=f"no arm64 root at {ARM64_ROOT} (tools/emulated/arm64_root.sh makes it)",
)
def test_an_emulated_aarch64_gives_the_recorded_chains():
    lines = run_probe("aarch64", ARM64_ROOT)
    assert lines["machine"] == "aarch64"
    assert lines["numba_cpu"] == "neoverse-n1"
    assert "neon fmla .4s" in lines["fma_vector_asm"]  # vectorised across j
    assert lines["chains"] == "all as recorded"


@pytest.mark.slow
@pytest.mark.skipif(
    not (ARM64_ROOT / "usr/bin/python3.11").exists(),
    reason=f"no arm64 root at {ARM64_ROOT} (tools/emulated/arm64_root.sh makes it)",
)
def test_the_integer_resize_gives_x86s_opencv_bytes_on_an_emulated_aarch64(tmp_path):
    """The universal mode's frames on aarch64: the same tables and the same bytes as
    x86-64's cv2.resize (500 frames of five games), which aarch64's own OpenCV does not
    give (recorded, not required: its HAL may change)."""
    import cv2
    import numpy as np

    from tests.training.test_linear_resize import GAMES, _screens
    from tools.emulated import resize_check

    grays = np.stack([
        cv2.cvtColor(np.maximum(screens[0], screens[1]), cv2.COLOR_RGB2GRAY)
        for game in GAMES for screens in _screens(game, 100, seed=len(game))
    ])  # fmt: skip
    x86 = np.stack([cv2.resize(g, (84, 84), interpolation=cv2.INTER_LINEAR) for g in grays])
    np.savez(tmp_path / "frames.npz", grays=grays, x86=x86)
    command = ["bash", str(RUN), "aarch64", str(ARM64_ROOT), "--", "python",
               "tools/emulated/resize_check.py", str(tmp_path / "frames.npz")]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["machine"] == "aarch64"
    assert lines["tables"] == resize_check.tables_digest()
    assert lines["ours_equal"] == "1 500"
    print("aarch64's own cv2.resize differs on", lines["opencv_differing"], "of 500 frames")


@pytest.mark.slow
@pytest.mark.emulated
@pytest.mark.skipif(
    not (ARM64_ROOT / "usr/bin/python3.11").exists(),
    reason=f"no arm64 root at {ARM64_ROOT} (tools/emulated/arm64_root.sh makes it)",
)
def test_the_universal_smoke_reference_replicates_on_an_emulated_aarch64(tmp_path):
    """reference/smoke, made on x86-64 under the lock's torch, spot-checked on qemu's
    aarch64 under torch 2.9.1 (`verify --reference --rerun`) up to the first process
    record with updates (62 of them, at step 1,250; qemu runs about 0.3 agent steps a
    second once updates start), as a reader with an ARM laptop would check it. Its time is
    in tools/emulated/README.md."""
    import time

    command = ["bash", str(RUN), "aarch64", str(ARM64_ROOT), "--", "python", "-m",
               "reprodqn.cli", "verify", "--reference", str(ROOT / "reference" / "smoke"),
               "--rerun", "deterministic/0", "--until", "1250",
               "--scratch", str(tmp_path / "rerun")]  # fmt: skip
    began = time.monotonic()
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=5400)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-3000:]
    assert "identical" in said
    print(f"aarch64 spot-check of reference/smoke to step 1250: {time.monotonic() - began:.0f} s")
