"""The image built and run for real (`-m container`; CI runs it): podman builds the
project's Dockerfile on a debootstrapped Debian base with the CPU torch, `make docker-run`
runs the smoke study inside it, and its chains and evaluations equal the committed smoke
reference's (`reference/smoke/`, which test_reference.py checks on this machine outside any
container): no second run of the study outside.

Inside, the study trains two of its six groups (`study.left_out` the other four): the
deterministic group, whose two runs must replicate, and the environment group, whose
sticky actions reach the emulator. What the image can get wrong (its packages, its user,
its records of itself) shows in any group, and the other four add about seven minutes of CI to
what tests/e2e/test_reference.py and the study's tests check outside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli_env, write_params

pytestmark = pytest.mark.container

BASE = "localhost/reprodqn-base:bookworm"
IMAGE = "localhost/reprodqn:test-cpu"
CALLER = (4321, 4321)  # a non-root caller whose files must not end up as the image's user
INSIDE_GROUPS = ("deterministic", "environment")
LEFT_OUT = ("exploration", "gpu", "initialization", "minibatch")
PODMAN = {"CONTAINER": "podman", "IMAGE": IMAGE}
RUNTIME = ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]  # the Makefile's PODMAN_FLAGS


def make(log: Path, *target: str, **variables) -> subprocess.Popen:
    args = ["make", "-C", str(ROOT), *target, *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.Popen(
        args,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
    )


def finish(process: subprocess.Popen, log: Path) -> None:
    status = process.wait()
    assert status == 0, f"{' '.join(process.args)} exited {status}:\n" + "\n".join(
        log.read_text().splitlines()[-40:]
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict[str, Path]:
    """The smoke study run inside the image on this machine, and the committed reference."""
    if shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.fail(
            "podman and debootstrap not installed (apt-get install podman debootstrap runc)"
        )
    tmp = tmp_path_factory.mktemp("container")
    inside = tmp / "inside"
    log = {name: tmp / f"{name}.log" for name in ("base", "build", "inside")}
    base = subprocess.Popen(
        [ROOT / ".ci/container/base", BASE],
        stdout=log["base"].open("w"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    finish(base, log["base"])
    finish(make(log["build"], "docker-build", TORCH="cpu", BASE=BASE, **PODMAN), log["build"])
    finish(make(log["inside"], "smoke-workspace", SMOKE=inside), log["inside"])
    params = str(inside / "params.yaml")
    left_out = f"study.left_out=[{','.join(LEFT_OUT)}]"
    write_params("--params", params, "--set", left_out, "--out", params)
    for path in (inside, *inside.rglob("*")):
        os.lchown(path, *CALLER)
    finish(
        make(
            log["inside"],
            "docker-run",
            WORKSPACE=inside,
            USER_ID=CALLER[0],
            GROUP_ID=CALLER[1],
            **PODMAN,
        ),
        log["inside"],
    )
    return {"inside": inside, "reference": ROOT / "reference" / "smoke"}


def conditions(root: Path) -> dict:
    return json.loads((root / "results" / "conditions.json").read_text())


def test_the_report_exists_and_the_deterministic_group_replicates_inside(smoke):
    reports = smoke["inside"] / "reports"
    assert (reports / "report.md").stat().st_size > 0
    verdict = json.loads((reports / "replicability.json").read_text())
    assert verdict["group"] == "deterministic" and verdict["runs"] == 2
    assert verdict["replicable"] is True


def test_every_file_in_the_workspace_belongs_to_the_calling_user(smoke):
    written = [
        p for p in smoke["inside"].rglob("*") if (p.lstat().st_uid, p.lstat().st_gid) != CALLER
    ]
    assert not written, f"{len(written)} files not owned by {CALLER}, e.g. {written[:3]}"
    assert (smoke["inside"] / "dvc.lock").exists()  # dvc repro did write here


def podman(*args: str) -> str:
    return subprocess.run(
        ["podman", *RUNTIME, *args],
        capture_output=True,
        text=True,
        check=True,
        env=cli_env(CONTAINERS_CONF=str(ROOT / ".ci/container/containers.conf")),
    ).stdout.strip()


def test_conditions_name_the_image_digest_and_that_it_ran_inside_a_container(smoke):
    image_id = podman("image", "inspect", "--format", "{{.Id}}", IMAGE)
    container = conditions(smoke["inside"])["container"]
    assert container == {
        "inside_container": True,
        "engine": "podman",
        "image": IMAGE,
        "image_digest": f"sha256:{image_id.removeprefix('sha256:')}",
        "torch_build": "cpu",
    }


def test_the_image_carries_its_sbom_and_the_study_inside_records_that_one(smoke):
    """The build baked the environment's SBOM; a caller's run finds it under the run's own
    key (so cyclonedx never runs in `docker-run`), and it is the one the study recorded."""
    found = "from reprodqn.determinism import sbom as p; " + (
        "path = p.environment_sbom_path(p.sbom_key()); print(path.read_text())"
    )
    user = f"{CALLER[0]}:{CALLER[1]}"
    baked = podman("run", "--rm", "--user", user, "-e", "HOME=/tmp", IMAGE, "python", "-c", found)
    recorded = (smoke["inside"] / "results" / "sbom.cdx.json").read_text()
    assert json.loads(baked) == json.loads(recorded)


def test_the_smoke_chains_inside_equal_the_committed_reference(smoke):
    inside, reference = (conditions(smoke[side])["numerics"] for side in ("inside", "reference"))
    # the same ISA floor, the same threads (the image also sets cuBLAS's GPU-only knob)
    assert inside == reference and inside["cpu_isa"] == "portable"
    compared = 0
    for pattern in ("runs/*/*/hashes.jsonl", "evaluations/*/*/eval.csv"):
        theirs = sorted(p.relative_to(smoke["reference"]) for p in smoke["reference"].glob(pattern))
        ours = sorted(p.relative_to(smoke["inside"]) for p in smoke["inside"].glob(pattern))
        assert ours == [path for path in theirs if path.parts[1] in INSIDE_GROUPS]
        assert len(ours) == 4  # 2 groups x 2 runs
        for path in ours:
            same = (smoke["inside"] / path).read_bytes() == (smoke["reference"] / path).read_bytes()
            assert same, f"{path} differs inside the container from the committed reference"
            compared += 1
    print(f"container: {compared} files identical inside and in reference/smoke")
