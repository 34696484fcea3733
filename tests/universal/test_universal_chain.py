"""The universal golden chain: a tiny training run in the universal numerics mode must give
the chain committed in tests/golden/, at every CPU floor this machine has and at 1 and 2
threads, and the universal probe (tools/universal_probe.py: the Nature network's updates,
every kernel) its committed hash. The same chain on every machine is the mode's promise;
the probe's record names each machine, torch version and emulated CPU that gave it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprodqn.determinism import isa
from tests.helpers import PARAMS, ROOT, cli_env, stop_after_first_resume_point, train_tiny

GOLDEN = ROOT / "tests" / "golden"
CHAIN = GOLDEN / "universal-tiny-nips.hashes.jsonl"
# the same run with no numerics or resize setting: the defaults, universal with the authors'
# resize (OpenCV's INTER_LINEAR, computed in integers); made on an AMD EPYC Zen 3
DEFAULT_CHAIN = GOLDEN / "universal-tiny-nips-default.hashes.jsonl"
PROBE = GOLDEN / "universal-probe.json"
SCALE = [
    "agent.network=nips",
    "agent.batch_size=8",
    "agent.target_sync_every=100",
    "agent.epsilon_decay_steps=300",
    "replay.capacity=1000",
    "replay.learning_starts=200",
    "train.steps=800",
    "train.checkpoint_every=400",
    "train.resume_every=400",
    "train.log_every=100",
]
OVERRIDES = ["compute.numerics=universal", "env.resize=linear_exact", *SCALE]


def universal_chain(
    runs_dir: Path, *extra: str, env: dict | None = None, base: list[str] = OVERRIDES
) -> list[str]:
    argv = [sys.executable, "-m", "reprodqn.cli", "train", "--group", "deterministic"]
    argv += ["--run", "0", "--params", str(PARAMS), "--runs-dir", str(runs_dir)]
    for item in (*base, *extra):
        argv += ["--set", item]
    environment = {**cli_env(), **(env or {})}
    subprocess.run(argv, check=True, capture_output=True, env=environment, cwd=runs_dir)
    return (runs_dir / "deterministic" / "0" / "hashes.jsonl").read_text().splitlines()


def floors_here() -> list[str]:
    flags = isa.machine_flags()
    return [floor for floor, need in isa.REQUIRED_FLAGS.items() if set(need) <= flags]


@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("compute.threads=2",),
        *[(f"compute.cpu_isa={f}",) for f in isa.FLOORS if f != "portable"],
    ],
    ids=lambda extra: ",".join(extra) or "portable-1-thread",
)
def test_the_universal_chain_is_the_golden_one(tmp_path, extra):
    floor = next((item.split("=")[1] for item in extra if "cpu_isa" in item), "portable")
    if floor not in floors_here():
        pytest.skip(f"this CPU lacks the {floor} floor")
    ours = universal_chain(tmp_path, *extra)
    golden = CHAIN.read_text().splitlines()
    assert json.loads(ours[-1])["updates"] > 100
    assert all(json.loads(line)["numerics"] == "universal" for line in ours)
    assert ours == golden, f"the universal chain parted from the golden one under {extra}"


@pytest.mark.parametrize(
    "extra", [(), ("compute.threads=2",), ("compute.cpu_isa=native",)], ids=lambda e: str(e)
)
def test_a_train_with_no_numerics_setting_is_universal_with_the_authors_resize(tmp_path, extra):
    """The default a fresh clone trains with: the universal numerics and OpenCV's
    INTER_LINEAR in integers, one chain at every floor and thread count."""
    ours = universal_chain(tmp_path, *extra, base=SCALE)
    recorded = json.loads((tmp_path / "deterministic" / "0" / "config.json").read_text())
    compute, env = recorded["config"]["compute"], recorded["config"]["env"]
    assert (compute["numerics"], env["resize"]) == ("universal", "linear")
    assert ours == DEFAULT_CHAIN.read_text().splitlines(), f"parted under {extra}"
    assert ours != CHAIN.read_text().splitlines()  # the resize is in the chain


# numba's code for another CPU: SSE2 without fma (libm's fmaf), AVX2, AVX-512 vector bodies
NUMBA_TARGETS = {"x86-64": (), "haswell": ("avx2",), "skylake-avx512": ("avx512f",)}


@pytest.mark.parametrize("target", NUMBA_TARGETS)
def test_the_universal_chain_is_one_at_every_vector_width(tmp_path, target):
    """The kernels compiled for narrower and wider vectors than this CPU's own: a sum split
    across lanes, or a vector body and a scalar tail that differ, would part the chain."""
    if not set(NUMBA_TARGETS[target]) <= isa.machine_flags():
        pytest.skip(f"this CPU cannot run {target} code")
    ours = universal_chain(tmp_path, env={"NUMBA_CPU_NAME": target, "NUMBA_CPU_FEATURES": ""})
    assert ours == CHAIN.read_text().splitlines(), f"parted with numba compiling for {target}"


@pytest.mark.parametrize(
    "variant", ["agent.n_step=3", "agent.dueling=true", "replay.prioritized=true"]
)
def test_each_dqn_variant_gives_one_universal_chain_at_two_floors_and_threads(tmp_path, variant):
    """3-step returns (gamma^k as running binary64 products), the dueling head (its streams
    read the torso through universal.fork) and prioritized replay (its powers by
    rounding.power64, its importance weights in the loss): the portable floor at 1 thread
    and this machine's own floor at 2 give one chain, which is not the plain DQN's."""
    (tmp_path / "portable").mkdir(), (tmp_path / "native").mkdir()
    portable = universal_chain(tmp_path / "portable", variant)
    native = universal_chain(
        tmp_path / "native", variant, "compute.cpu_isa=native", "compute.threads=2"
    )
    assert json.loads(portable[-1])["updates"] > 100
    assert portable == native
    assert portable != CHAIN.read_text().splitlines()


def test_a_resumed_universal_run_gives_the_golden_chain(tmp_path):
    """Stopped as a crash would after its first resume point, then resumed: the universal
    optimizer's state and the layers' cached transposes come back as they were."""
    from reprodqn.config.params import load_params

    params = load_params(PARAMS, [*OVERRIDES, "train.resume_every=300"])
    assert stop_after_first_resume_point(params, tmp_path) == 300
    resumed = [json.dumps(line, sort_keys=True) for line in train_tiny(params, tmp_path)]
    assert resumed == [
        json.dumps(json.loads(g), sort_keys=True) for g in CHAIN.read_text().splitlines()
    ]


def test_the_probe_gives_its_golden_hash():
    from tools.universal_probe import probe

    record = json.loads(PROBE.read_text())
    ours = probe(record["updates"], threads=2)
    assert (ours["sha256"], ours["greedy"]) == (record["sha256"], record["greedy"])


EMULATED = {  # target: the root whose Python runs there (tools/emulated/)
    "nehalem": Path(sys.prefix),
    "aarch64": Path(os.environ.get("REPRODQN_ARM64_ROOT", "/work/emu-root/arm64")),
}


@pytest.mark.slow
@pytest.mark.emulated
@pytest.mark.parametrize("target", EMULATED)
def test_an_emulated_cpu_gives_the_golden_probe(target):
    """qemu's Nehalem (SSE4.2, no AVX or FMA: libm's fmaf) and its aarch64 (NEON, with
    torch 2.9.1): minutes each. The arm64 root comes from tools/emulated/arm64_root.sh."""
    root = EMULATED[target]
    if not shutil.which(f"qemu-{'aarch64' if target == 'aarch64' else 'x86_64'}-static"):
        pytest.skip("no qemu-user-static")
    if target == "aarch64" and not (root / "usr/bin/python3.11").exists():
        pytest.skip(f"no arm64 root at {root} (tools/emulated/arm64_root.sh makes it)")
    command = ["bash", "tools/emulated/run.sh", target, str(root), "--", "python"]
    command += ["tools/universal_probe.py"]
    shown = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert shown.returncode == 0, shown.stderr[-2000:]
    ours, golden = json.loads(shown.stdout.splitlines()[-1]), json.loads(PROBE.read_text())
    assert (ours["sha256"], ours["greedy"]) == (golden["sha256"], golden["greedy"]), ours
