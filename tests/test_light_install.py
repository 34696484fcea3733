"""`pip install reprodqn` is light: reprodqn.exact, the Gymnasium envs and evaluate-policy
need none of the study's stack, which is the `study` extra; a study command run without it
says so in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.helpers import ROOT, cli_env

STUDY = {"scipy", "matplotlib", "mlflow", "dvc", "submitit", "markdown-it-py", "rocrate"}
STUDY |= {"jsonschema", "packaging"}  # packaging: the bundle's lock (report.lock)
STUDY_MODULES = ("scipy", "matplotlib", "mlflow", "dvc", "submitit", "markdown_it", "rocrate")
STUDY_MODULES += ("jsonschema", "stable_baselines3")


def _names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in requirements}


def test_the_study_stack_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not _names(project["dependencies"]) & STUDY
    assert _names(project["optional-dependencies"]["study"]) == STUDY
    makefile = (ROOT / "Makefile").read_text()  # the README's commands set it all up
    assert "-e '.[study,test,sb3]'" in makefile and "--extra study --extra sb3" in makefile


ABSENT = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):  # as in an install without the study extra
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {STUDY_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""
API = """
import gymnasium as gym
import torch
from reprodqn import exact
import reprodqn.envs.breakout
import reprodqn.evaluation.foreign
env = gym.make("reprodqn/Breakout-v0")
env.reset(seed=1)
env.step(0)
chain = exact.HashChain("run")
exact.load_resume_point("run", {"chain": chain})
chain.checkpoint(0, torch.nn.Linear(2, 2))
exact.save_resume_point("run", 0, {"chain": chain, "env": exact.GymEnv(gym.make("CartPole-v1"))})
"""
CLI = """
from reprodqn.cli.main import main
try:
    main(["evaluate-policy", "--help"])
except SystemExit as done:
    assert done.code == 0
sys.exit(main(["init", "workspace"]))  # the study's workspace; dvc repro needs the extra
"""


def test_the_api_envs_and_evaluate_policy_run_without_the_study_stack(tmp_path):
    def run(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", ABSENT + script, str(ROOT / "params.yaml")],
            cwd=tmp_path,
            env=cli_env(),
            capture_output=True,
            text=True,
        )

    api = run(API)
    assert api.returncode == 0, api.stderr[-3000:]
    assert (tmp_path / "run" / "hashes.jsonl").exists()
    cli = run(CLI)
    assert cli.returncode == 0 and (tmp_path / "workspace" / "dvc.yaml").exists(), cli.stderr


def test_a_study_command_without_the_study_extra_says_so_in_one_line(tmp_path, capsys):
    from reprodqn.cli import main as cli

    def needs_mlflow(args):
        raise ModuleNotFoundError("No module named 'mlflow'", name="mlflow")

    args = cli.build_parser().parse_args(["init", str(tmp_path / "workspace")])
    args.handler = needs_mlflow
    assert cli._run(args) == 2
    assert capsys.readouterr().err == (
        "reprodqn: error: init needs mlflow, which is not installed: the study's commands "
        "need pip install 'reprodqn[study]'\n"
    )
