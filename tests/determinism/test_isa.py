"""The CPU instruction-set floor reaches oneDNN, ATen and MKL in every process: runs pinned
to it agree; lowering oneDNN's or ATen's knob below it changes the weights (so each is
live), lowering MKL's changes nothing (the network computes nothing in MKL); a setting made
after torch is loaded would do nothing, and is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reprodqn.core.errors import InputError
from reprodqn.determinism import isa
from reprodqn.study import launch
from tests.helpers import PARAMS, TINY, cli_env

# Nature network: the paper's kernels (conv, GEMM) are what the knobs select between
# the floor pins torch's kernels: the standard numerics' (the universal mode's are its own)
RUN = [
    *TINY,
    "compute.numerics=standard",
    "agent.network=nature",
    "train.steps=300",
    "replay.learning_starts=100",
]
# the default floor, portable: AVX2 kernels, MKL on the branch it runs alike on every vendor
PINNED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
# each knob moved off the floor (MKL: AUTO, its unpinned branch)
LOWERED = {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"}


def final_weights(tmp_path, name, cpu_isa, environment=None, prelude="") -> str:
    env = cli_env()
    for knob in isa.KNOBS:
        env.pop(knob, None)
    env.update(environment or {})
    argv = [
        "train",
        "--group",
        "deterministic",
        "--run",
        "0",
        "--params",
        str(PARAMS),
        "--runs-dir",
        str(tmp_path / name),
        "--set",
        f"compute.cpu_isa={cpu_isa}",
    ]
    for item in RUN:
        argv += ["--set", item]
    code = f"{prelude}\nimport sys\nfrom reprodqn.cli.main import main\nsys.exit(main({argv!r}))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = tmp_path / name / "deterministic" / "0"
    applied = json.loads((run_dir / "conditions.json").read_text())
    last = (run_dir / "hashes.jsonl").read_text().splitlines()[-1]
    return json.loads(last)["weights_sha256"], applied


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    if not {"avx", "avx2", "fma"} <= isa.machine_flags():
        pytest.skip("this CPU is below the AVX2 floor")
    return final_weights(tmp_path_factory.mktemp("pinned"), "pinned", "portable")


def test_pinned_runs_agree_whatever_the_environment_says(pinned, tmp_path):
    weights, conditions = pinned
    assert conditions["cpu"]["torch_cpu_capability"] == "AVX2"
    assert conditions["numerics"]["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert conditions["numerics"]["cpu_isa"] == "portable"
    assert conditions["numerics"]["environment"]["MKL_CBWR"] == "COMPATIBLE"
    again, _ = final_weights(tmp_path, "again", "portable", environment=LOWERED)  # params win
    assert again == weights


@pytest.mark.parametrize("knob", sorted(LOWERED))
def test_each_knob_lowered_below_the_floor_changes_the_weights(pinned, tmp_path, knob):
    weights, _ = pinned
    environment = {**PINNED, knob: LOWERED[knob]}
    lowered, conditions = final_weights(tmp_path, knob, "native", environment=environment)
    assert conditions["numerics"]["environment"][knob] == LOWERED[knob]
    if knob == "MKL_CBWR":  # MKL's branches are vendor-dependent, so no layer runs in MKL
        assert lowered == weights, "a layer computes in MKL (dqn.network routes to oneDNN)"
    else:
        assert lowered != weights, f"{knob}={LOWERED[knob]} did not reach its library"


LATE = """
import os, torch
x = torch.ones(2, 4, 84, 84)
torch.nn.functional.conv2d(x, torch.ones(8, 4, 8, 8), stride=4).relu().sum()  # oneDNN, ATen
torch.ones(64, 64) @ torch.ones(64, 64)                                      # MKL
os.environ.update(ONEDNN_MAX_CPU_ISA="SSE41", ATEN_CPU_CAPABILITY="default",
                  MKL_CBWR="COMPATIBLE")
"""


def test_a_setting_made_after_torch_loads_is_refused_not_ignored(pinned, tmp_path):
    # torch's libraries fix their kernels when they first run: later settings do nothing
    native, _ = final_weights(tmp_path, "native", "native")
    late, _ = final_weights(tmp_path, "late", "native", prelude=LATE)
    assert late == native
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run(
            [sys.executable, "-c", "import torch\nfrom reprodqn import isa\nisa.apply('avx2')"],
            check=True,
            capture_output=True,
            env={k: v for k, v in cli_env().items() if k not in isa.KNOBS},
        )


def test_a_machine_below_the_floor_gets_one_clear_line(monkeypatch):
    monkeypatch.setattr(isa, "machine_flags", lambda: {"sse4_1", "sse4_2", "avx"})
    with pytest.raises(
        InputError,
        match=r"compute.cpu_isa: avx2 needs a CPU with avx, avx2, "
        r"fma; this one lacks avx2, fma",
    ):
        isa.apply("avx2")


def test_the_floor_reaches_a_worker_of_the_study_executor(tmp_path, monkeypatch):
    for knob in isa.KNOBS:
        monkeypatch.delenv(knob, raising=False)
    job = launch.Job(
        "isa/0",
        ["conditions", "--params", str(PARAMS), "--out-dir", str(tmp_path)],
        launch.job_environment(threads=1),
    )
    launch.check(launch.LocalExecutor(1).run([job], "test"), "test")
    record = json.loads((tmp_path / "conditions.json").read_text())
    assert {k: record["numerics"]["environment"][k] for k in PINNED} == PINNED
    assert record["cpu"]["torch_cpu_capability"] == "AVX2"


def test_an_x86_floor_on_an_arm_cpu_is_refused_but_in_the_universal_numerics(monkeypatch):
    """The floor pins torch's kernels: on aarch64 the standard numerics needs native, and
    a universal study's params (portable by default) run as they are."""
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    for knob in isa.KNOBS:
        monkeypatch.delenv(knob, raising=False)
    with pytest.raises(InputError, match="portable is an x86-64 floor; this machine is aarch64"):
        isa.apply("portable")
    applied = isa.apply("portable", "universal")
    assert all(applied[knob] is None for knob in isa.KNOBS)  # native's: none set
