"""The CUDA image, as far as a machine without a GPU can check it (`-m cuda_image`; about 3
GB of wheels, so not in CI's run: the README's container section has its figures). podman
builds the Dockerfile with TORCH=cuda, the lock's CUDA torch and its nvidia-* libraries, on
the debootstrapped Debian bookworm base (Python 3.11); inside it `reprodqn conditions` must
say: the CUDA build of torch, no device, the portable CPU floor; and the golden run must give
tests/golden's chain on the CPU, so a CPU user of the CUDA image verifies against the same
chains as a user of the CPU one."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.determinism.test_golden import COMMAND, GOLDEN, OVERRIDES
from tests.e2e.test_container_run import BASE, finish, make
from tests.helpers import PARAMS, ROOT, cli_env

pytestmark = pytest.mark.cuda_image

IMAGE = "localhost/reprodqn:test-cuda"
ENGINE = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def inside(workspace: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *ENGINE,
            "run",
            "--rm",
            "--user",
            "0:0",
            "-v",
            f"{workspace}:/workspace",
            "-w",
            "/workspace",
            "-e",
            "HOME=/tmp",
            IMAGE,
            *command,
        ],
        capture_output=True,
        text=True,
        env=cli_env(CONTAINERS_CONF=str(ROOT / ".ci/container/containers.conf")),
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    if shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.fail(
            "podman and debootstrap not installed (apt-get install podman debootstrap runc)"
        )
    tmp = tmp_path_factory.mktemp("cuda-image")
    log = tmp / "build.log"
    finish(
        subprocess.Popen(
            [ROOT / ".ci/container/base", BASE],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        ),
        log,
    )
    start = time.perf_counter()
    finish(make(log, "docker-build", TORCH="cuda", BASE=BASE, CONTAINER="podman", IMAGE=IMAGE), log)
    size = subprocess.run(
        [*ENGINE, "image", "inspect", "--format", "{{.Size}}", IMAGE],
        capture_output=True,
        text=True,
        check=True,
        env=cli_env(CONTAINERS_CONF=str(ROOT / ".ci/container/containers.conf")),
    ).stdout
    print(f"cuda image: built in {time.perf_counter() - start:.0f} s, {int(size) / 1e9:.2f} GB")
    root = tmp / "workspace"
    root.mkdir()
    shutil.copy(PARAMS, root / "params.yaml")
    shutil.copytree(ROOT / "start_sequences", root / "start_sequences")
    return root


def test_conditions_inside_name_the_cuda_build_no_device_and_the_cpu_floor(workspace):
    result = inside(workspace, "reprodqn", "conditions")
    assert result.returncode == 0, result.stderr[-2000:]
    conditions = json.loads((workspace / "results" / "conditions.json").read_text())
    assert conditions["container"]["torch_build"] == "cuda"
    assert conditions["gpu"]["present"] is False and conditions["gpu"]["torch_cuda_build"]
    assert conditions["device"] == "cpu" and conditions["numerics"]["cpu_isa"] == "portable"
    assert conditions["cpu"]["torch_cpu_capability"] == "AVX2"


def test_the_golden_chain_replicates_inside_on_the_cpu(workspace):
    argv = [("params.yaml" if arg == str(PARAMS) else arg) for arg in COMMAND]  # its copy
    argv += ["--runs-dir", "golden-runs"]
    for item in OVERRIDES:
        argv += ["--set", item]
    result = inside(workspace, "reprodqn", *argv)
    assert result.returncode == 0, result.stderr[-2000:]
    ours = (workspace / "golden-runs" / "deterministic" / "0" / "hashes.jsonl").read_text()
    assert ours == (GOLDEN / "tiny-nips-4000.hashes.jsonl").read_text()
