"""The package as a user gets it: built into an sdist and a wheel (`python -m build`, `twine
check`), installed non-editable into a fresh virtual environment from the lock (hashes
checked; torch from the local CPU wheel), and used from an empty directory with no
checkout in sight: an eval episode through `gymnasium.make`, `reprodqn evaluate-policy` on
an SB3 model, `reprodqn init` and two tiny training runs. Each gives the checkout's result.

Run by CI (`-m wheel`, about 2 minutes with a warm uv cache); the wheel's data files are
also checked against the checkout's in the fast tests (test_packaged.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, TINY, cli_env

pytestmark = pytest.mark.wheel

TORCH_WHEELS = Path(os.environ.get("TORCH_WHEELS", "/opt/wheels"))
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
# the CUDA build's own packages, which a CPU install leaves out (as the image's cpu build)
CUDA_ONLY = ("torch==", "triton==", "cuda-", "nvidia-")
EPISODE = """
import json, sys
import gymnasium as gym
import reprodqn.envs
gym.register_envs(reprodqn.envs)
env = gym.make("reprodqn/Breakout-v0", mode="eval", max_frames=1500)
obs, info = env.reset(options={"episode": 7})
score, steps, done = 0.0, 0, False
while not done:  # a fixed policy: the agent's choice is not what is checked here
    obs, reward, terminated, truncated, info = env.step(steps % 4)
    score, steps, done = score + reward, steps + 1, terminated or truncated
print(json.dumps({"score": score, "steps": steps, "obs": int(obs.sum()), **info}))
"""


def cpu_requirements(out: Path) -> Path:
    """requirements.lock without torch's CUDA build, plus the local CPU wheel by hash."""
    kept, keep = [], True
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and line[0].isalpha():
            keep = not line.startswith(CUDA_ONLY) or line.startswith("nvidia-ml-py==")
        if keep:
            kept.append(line)
    wheel = TORCH_WHEELS / TORCH_WHEEL
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    kept.append(f"torch @ {wheel.as_uri()} --hash=sha256:{digest}")
    out.write_text("\n".join(kept) + "\n")
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir())],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh environment: the lock, then the wheel (non-editable) with no dependencies
    left to resolve; no checkout on its path."""
    if not (TORCH_WHEELS / TORCH_WHEEL).is_file():
        pytest.skip(f"no local torch wheel {TORCH_WHEELS / TORCH_WHEEL}")
    root = tmp_path_factory.mktemp("fresh") / "venv"
    uv = [str(Path(sys.executable).parent / "uv")]
    python = root / "bin" / "python"
    steps = [
        [*uv, "venv", "--quiet", "--python", sys.executable, str(root)],
        [*uv, "pip", "install", "--quiet", "--python", str(python), "--require-hashes",
         "--no-deps", "-r", str(cpu_requirements(root.parent / "requirements.txt"))],
        [*uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps",
         str(next(dist.glob("*.whl")))],
        [*uv, "pip", "check", "--python", str(python)],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        assert done.returncode == 0, f"{step[:3]}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return root


def fresh_env(venv: Path) -> dict:
    """The fresh environment's tools first, nothing of the checkout importable."""
    env = cli_env()
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def run_in(cwd: Path, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)


def test_the_installed_package_is_not_the_checkout(venv, tmp_path):
    found = run_in(
        tmp_path,
        ["python", "-c", "import reprodqn; print(reprodqn.__file__, reprodqn.__version__)"],
        fresh_env(venv),
    )
    where, version = found.stdout.split()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    assert (
        version
        == subprocess.run(
            [venv / "bin" / "reprodqn", "--version"], capture_output=True, text=True
        ).stdout.split()[1]
    )


def test_an_eval_episode_from_an_empty_directory_is_the_checkouts(venv, tmp_path):
    installed = run_in(tmp_path / "empty", ["python", "-c", EPISODE], fresh_env(venv))
    assert installed.returncode == 0, installed.stderr
    checkout = run_in(tmp_path / "checkout", [sys.executable, "-c", EPISODE], cli_env())
    assert json.loads(installed.stdout) == json.loads(checkout.stdout)
    assert json.loads(installed.stdout)["start_sequence"] == 7


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A small SB3 DQN (untrained: its greedy actions are what evaluate-policy plays)."""
    from stable_baselines3 import DQN

    from reprodqn.envs import AtariEnv

    saved = tmp_path_factory.mktemp("sb3") / "dqn.zip"
    DQN("CnnPolicy", AtariEnv(), buffer_size=100, seed=3, device="cpu").save(saved)
    return saved


def test_evaluate_policy_on_an_sb3_model_from_an_empty_directory(venv, model, tmp_path):
    sets = ["--set", "evaluation.episodes=3", "--set", "evaluation.max_frames=800"]
    results = {}
    for name, command, env in (
        ("installed", "reprodqn", fresh_env(venv)),
        ("checkout", str(Path(sys.executable).parent / "reprodqn"), cli_env()),
    ):
        done = run_in(
            tmp_path / name,
            [command, "evaluate-policy", str(model), "--out-dir", "out", "--workers", "1", *sets],
            env,
        )
        assert done.returncode == 0, done.stderr
        results[name] = (tmp_path / name / "out" / "eval.csv").read_text()
    assert results["installed"] == results["checkout"]
    assert len(results["installed"].splitlines()) == 4  # a header and three episodes


def test_init_then_train_twice_gives_one_chain_the_checkouts(venv, tmp_path):
    env = fresh_env(venv)
    made = run_in(tmp_path, ["reprodqn", "init", "study"], env)
    assert made.returncode == 0, made.stderr
    study = tmp_path / "study"
    assert (study / "params.yaml").read_text() == (ROOT / "params.yaml").read_text()
    sets = [arg for item in TINY for arg in ("--set", item)]
    for run in ("0", "1"):  # the deterministic group's runs share every seed
        done = run_in(
            study, ["reprodqn", "train", "--group", "deterministic", "--run", run, *sets], env
        )
        assert done.returncode == 0, done.stderr
    chains = [(study / "runs" / "deterministic" / r / "hashes.jsonl").read_text() for r in "01"]
    assert chains[0] == chains[1] and len(chains[0].splitlines()) == 4
    checkout = tmp_path / "checkout"
    done = run_in(
        checkout,
        [sys.executable, "-m", "reprodqn.cli", "train", "--group", "deterministic", "--run",
         "0", "--params", str(ROOT / "params.yaml"), *sets],
        cli_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (checkout / "runs" / "deterministic" / "0" / "hashes.jsonl").read_text() == chains[0]


def test_a_workspace_bundle_replicates_as_its_replicate_md_says(venv, tmp_path):
    """A workspace's bundle, unpacked elsewhere: its REPLICATE.md's steps (a new workspace
    beside it, the bundle's params) give the run's chain, which verify finds identical;
    inside the bundle, training is refused."""
    import tarfile

    env = fresh_env(venv)
    sets = [arg for item in TINY for arg in ("--set", item)]
    made = run_in(tmp_path, ["reprodqn", "init", "study"], env)
    assert made.returncode == 0, made.stderr
    study = tmp_path / "study"
    tiny = ["reprodqn", "params", "--params", "params.yaml", *sets, "--out", "params.yaml"]
    for argv in (tiny, ["reprodqn", "train", "--group", "deterministic", "--run", "0"]):
        done = run_in(study, argv, env)
        assert done.returncode == 0, done.stderr
    done = run_in(study, ["reprodqn", "bundle", "--out", "dist/b.tar.gz"], env)
    assert done.returncode == 0, done.stderr
    with tarfile.open(study / "dist" / "b.tar.gz") as tar:
        tar.extractall(tmp_path / "reader", filter="data")
    page = (tmp_path / "reader" / "reprodqn-bundle" / "REPLICATE.md").read_text()
    assert 'echo "reprodqn-bundle/wheels/reprodqn-' in page  # installed already, by hash
    checked = run_in(tmp_path / "reader", ["reprodqn", "verify", "reprodqn-bundle"], env)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # the page's check
    steps = [
        ["reprodqn", "init", "replication"],
        ["cp", "reprodqn-bundle/params.yaml", "replication/"],
    ]
    for argv in steps:
        done = run_in(tmp_path / "reader", argv, env)
        assert done.returncode == 0, done.stderr
    replication = tmp_path / "reader" / "replication"
    train = ["reprodqn", "train", "--group", "deterministic", "--run", "0"]
    done = run_in(replication, train, env)  # one run of the study's dvc repro
    assert done.returncode == 0, done.stderr
    verified = run_in(replication, ["reprodqn", "verify", "--reference", "../reprodqn-bundle"], env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("verify: identical: 1 run")
    inside = run_in(tmp_path / "reader" / "reprodqn-bundle", train, env)
    assert inside.returncode == 2 and "an unpacked bundle" in inside.stderr


def test_a_data_file_dropped_from_the_install_is_one_line_naming_it(venv, model, tmp_path):
    """What the tests above rely on: with the authors' states gone from the install, the
    episode they played fails, in one line naming the file."""
    found = run_in(
        tmp_path,
        ["python", "-c", "import reprodqn.core.packaged as p; print(p.authors_start_sequences())"],
        fresh_env(venv),
    )
    states = Path(found.stdout.strip())
    kept = tmp_path / "kept.json"
    shutil.move(states, kept)
    try:
        broken = run_in(tmp_path / "empty", ["python", "-c", EPISODE], fresh_env(venv))
        evaluated = run_in(
            tmp_path / "empty",
            ["reprodqn", "evaluate-policy", str(model), "--out-dir", "out"],
            fresh_env(venv),
        )
    finally:
        shutil.move(kept, states)
    assert broken.returncode != 0 and "missing from the installed reprodqn" in broken.stderr
    assert evaluated.returncode == 2
    assert evaluated.stderr.count("\n") == 1 and "authors.json: missing" in evaluated.stderr


@pytest.mark.parametrize("numerics", ["standard", "universal"])
def test_a_study_made_from_the_template_installs_and_passes_its_own_tests(
    venv, dist, tmp_path, numerics
):
    """`copier copy` of this repository's template (copier.yml, template/), then the
    generated project's own `make test` into the fresh environment (its reprodqn from the
    wheel): two runs one chain, SIGKILL and resume, a changed seed named by verify; in
    either numerics."""
    project = tmp_path / "study"
    copier = Path(sys.executable).parent / "copier"
    wheel = next(dist.glob("*.whl"))
    answers = ["--data", "project_name=Template check", "--data", f"reprodqn_requirement={wheel}"]
    answers += ["--data", f"numerics={numerics}"]
    made = subprocess.run(
        [copier, "copy", "--defaults", "--vcs-ref", "HEAD", *answers, str(ROOT), str(project)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert "project_slug: template-check" in (project / ".copier-answers.yml").read_text()
    uv = Path(sys.executable).parent / "uv"
    tested = run_in(
        project,
        [
            "make",
            "test",
            f"VENV={venv}",
            f"PIP_INSTALL={uv} pip install --python {venv}/bin/python",
        ],
        fresh_env(venv),
    )
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "3 passed" in tested.stdout
