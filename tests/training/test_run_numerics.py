"""The universal default never switches a run silently: a params file or a recorded run
that names no numerics mode is standard (as it computed before the mode existed), and a
standard run resumed or evaluated with params that name no mode on the command line keeps
its mode, said in one line."""

from __future__ import annotations

import subprocess

from reprodqn.config.params import RunConfig, load_params, resolve_run
from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.training.run_numerics import keep_recorded_numerics
from tests.helpers import PARAMS, TINY, cli_env, train_command

STANDARD = "compute.numerics=standard"


def test_the_default_is_universal_and_a_file_without_the_mode_is_standard(tmp_path):
    assert RunConfig.model_fields["compute"].annotation.model_fields["numerics"].default == (
        "universal"
    )
    assert load_params(PARAMS).compute.numerics == "universal"
    older = tmp_path / "params.yaml"
    text = PARAMS.read_text()
    older.write_text("".join(line for line in text.splitlines(True) if "numerics:" not in line))
    said: list[str] = []
    params = load_params(older, notice=said.append)
    assert params.compute.numerics == "standard"
    assert len(said) == 1 and "lacks compute.numerics" in said[0]
    assert "compute.numerics: standard" in said[0]


def test_a_recorded_config_without_the_mode_keeps_its_standard_digest():
    standard = resolve_run(load_params(PARAMS, [STANDARD]), "deterministic", 0)
    recorded = standard.model_dump(mode="json")
    del recorded["compute"]["numerics"]  # a run trained before the mode existed
    assert RunConfig.from_record(recorded).digest() == standard.digest()
    universal = resolve_run(load_params(PARAMS), "deterministic", 0)
    assert universal.digest() != standard.digest()


def _record(run_dir, config: RunConfig) -> None:
    from reprodqn.core.atomic import write_json

    run_dir.mkdir(parents=True)
    body = {"digest": config.digest(), "config": config.model_dump(mode="json")}
    write_json(run_dir / workspace.RUN_CONFIG, body)


def test_a_standard_run_keeps_its_mode_unless_the_command_names_one(tmp_path):
    standard = resolve_run(load_params(PARAMS, [STANDARD]), "deterministic", 0)
    _record(tmp_path / "run", standard)
    asked = resolve_run(load_params(PARAMS), "deterministic", 0)
    kept, line = keep_recorded_numerics(asked, tmp_path / "run", named=False)
    assert kept.digest() == standard.digest() and kept.compute.numerics == "standard"
    assert line is not None and "keeps the standard numerics" in line
    assert "--set compute.numerics=universal --restart" in line
    same, said = keep_recorded_numerics(asked, tmp_path / "run", named=True)
    assert same is asked and said is None
    other = resolve_run(load_params(PARAMS, ["agent.learning_rate=0.001"]), "deterministic", 0)
    same, said = keep_recorded_numerics(other, tmp_path / "run", named=False)
    assert same is other and said is None  # other params changed: train's refusal stands


def test_train_resumes_a_standard_run_in_its_mode_and_says_so(tmp_path):
    runs = tmp_path / "runs"
    first = subprocess.run(
        train_command(runs, [*TINY, STANDARD]), capture_output=True, text=True, env=cli_env()
    )
    assert first.returncode == 0, first.stderr
    run_dir = workspace.run_dir(runs, "deterministic", 0)
    before = workspace.read_hashes(run_dir)
    again = subprocess.run(train_command(runs, TINY), capture_output=True, text=True, env=cli_env())
    assert again.returncode == 0, again.stderr
    assert "train deterministic/0: keeps the standard numerics it was trained in" in again.stderr
    assert workspace.read_hashes(run_dir) == before
    recorded = read_json(run_dir / workspace.RUN_CONFIG, "run config")["config"]
    assert recorded["compute"]["numerics"] == "standard"
    named = subprocess.run(
        train_command(runs, [*TINY, "compute.numerics=universal"]),
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert named.returncode == 2 and "--restart" in named.stderr  # asked by name: refused
