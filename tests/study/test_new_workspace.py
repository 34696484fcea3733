"""`reprodqn init`: a workspace from the package alone, whose pipelines name the installed
package instead of a checkout's modules; and what a command says where there is none."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from reprodqn.core.errors import InputError
from reprodqn.study import new_workspace
from tests.helpers import ROOT, cli_env


def reprodqn(cwd, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=cli_env(),
    )


def test_init_writes_a_workspace_whose_stages_depend_on_the_installed_package(tmp_path):
    written = new_workspace.init(tmp_path / "study")
    study = tmp_path / "study"
    assert all((study / name).is_file() for name in written)
    assert (study / "params.yaml").read_text() == (ROOT / "params.yaml").read_text()
    for pipeline in ("dvc.yaml", "start_sequences/dvc.yaml"):
        ours = yaml.safe_load((study / pipeline).read_text())["stages"]
        checkout = yaml.safe_load((ROOT / pipeline).read_text())["stages"]
        assert set(ours) - set(checkout) == ({"installed"} if pipeline == "dvc.yaml" else set())
        for name, stage in checkout.items():
            deps = ours[name].get("deps", [])
            assert not [d for d in deps if str(d).startswith("src/")]
            others = [d for d in stage.get("deps", []) if not str(d).startswith("src/")]
            assert [d for d in deps if d != new_workspace.INSTALLED_RECORD] == others
            assert deps.count(new_workspace.INSTALLED_RECORD) == 1
    installed = yaml.safe_load((study / "dvc.yaml").read_text())["stages"]["installed"]
    assert installed["always_changed"] and installed["cmd"] == "reprodqn installed"


def test_init_never_overwrites_a_workspace(tmp_path):
    (tmp_path / "params.yaml").write_text("mine\n")
    with pytest.raises(InputError, match="params.yaml: already there"):
        new_workspace.init(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"]
    assert (tmp_path / "params.yaml").read_text() == "mine\n"


def test_a_command_that_needs_a_workspace_names_init_where_there_is_none(tmp_path):
    done = reprodqn(tmp_path, "train", "--group", "deterministic", "--run", "0")
    assert done.returncode == 2 and not list(tmp_path.iterdir())
    assert done.stderr.count("\n") == 1 and "`reprodqn init [DIR]`" in done.stderr
    explained = reprodqn(tmp_path, "params", "--explain", "env")  # needs none: the package's
    assert explained.returncode == 0 and "env.game" in explained.stdout
    version = reprodqn(tmp_path, "--version")
    assert version.returncode == 0 and version.stdout.startswith("reprodqn ")


def test_a_params_file_of_another_version_says_what_it_lacks_and_does_not_know(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    older = text.replace("  n_step: 1 ", "  # n_step: 1 ").replace(
        "ranker:\n", "ranker:\n  warmup: 3\n"
    )
    (tmp_path / "params.yaml").write_text(older)
    done = reprodqn(tmp_path, "params", "--explain")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "does not know ranker.warmup; it also lacks agent.n_step" in done.stderr
    (tmp_path / "params.yaml").write_text(older.replace("  warmup: 3\n", ""))
    done = reprodqn(tmp_path, "params", "--explain", "agent")  # an older file: its defaults
    assert done.returncode == 0 and "agent.n_step" in done.stdout
    assert done.stderr.count("\n") == 1
    assert "lacks agent.n_step, so they behave as before they existed" in done.stderr


def test_a_ranker_checkpoint_that_is_not_there_is_refused_before_any_stage(tmp_path):
    new_workspace.init(tmp_path)
    done = reprodqn(
        tmp_path, "train", "--group", "deterministic", "--run", "0",
        "--set", "ranker.checkpoint=ranker/none.safetensors",
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "ranker.checkpoint: ranker/none.safetensors: no such weights file" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_study_of_another_game_gets_its_start_states_and_is_refused_anothers_before_training(
    tmp_path,
):
    """The workspace holds every game's start states the package carries, so params can
    name them; a study of Breakout named Pong's is refused before it trains (a study of
    Pong left with the default plays Pong's: tests/evaluation/test_game_alone.py)."""
    new_workspace.init(tmp_path)
    assert (tmp_path / "start_sequences" / "pong.json").read_bytes() == (
        ROOT / "start_sequences" / "pong.json"
    ).read_bytes()
    pong = "evaluation.start_sequences=start_sequences/pong.json"
    done = reprodqn(tmp_path, "study", "train", "--set", pong)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "start_sequences/pong.json: start states of 'pong', but env.game is 'breakout'" in (
        done.stderr
    )
    assert "evaluation.start_sequences: start_sequences/authors.json," in done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_report_with_nothing_evaluated_says_so_and_writes_nothing(tmp_path):
    new_workspace.init(tmp_path)
    done = reprodqn(tmp_path, "report")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "evaluations: no evaluated run of this study's groups there" in done.stderr
    assert not (tmp_path / "reports").exists()


def test_zero_workers_is_refused_not_read_as_the_default(tmp_path):
    done = reprodqn(tmp_path, "study", "evaluate", "--workers", "0")
    assert done.returncode == 2
    assert "argument --workers: expected a positive whole number, got '0'" in done.stderr


def test_init_says_what_it_made_on_stdout(tmp_path):
    """Its success line went to stderr, where a command's notes go, not its result."""
    done = reprodqn(tmp_path, "init", "study")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("init: a study workspace in study (")
