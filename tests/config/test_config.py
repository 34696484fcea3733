"""params.yaml holds the paper's values, the study's groups resolve as the paper describes,
and bad input is one clear line naming the field."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from pydantic import BaseModel, ValidationError, model_validator

from reprodqn.config.params import load_params, resolve_run
from reprodqn.config.sources import one_line
from reprodqn.config.study import GROUP_NAMES
from reprodqn.core.errors import InputError
from tests.helpers import PARAMS, cli_env


def test_real_params_hold_the_papers_hyperparameters():
    p = load_params(PARAMS)
    assert (p.env.frame_skip, p.env.history_length, p.env.screen_size) == (4, 4, 84)
    assert p.env.noop_max == 30 and p.env.sticky_p == 0.0
    assert p.env.life_loss_ends_episode
    assert p.agent.network == "nature"
    agent = p.agent
    assert (agent.learning_rate, agent.rmsprop_alpha, agent.rmsprop_eps) == (2.5e-4, 0.95, 0.01)
    assert (p.agent.discount, p.agent.batch_size, p.agent.update_every) == (0.99, 32, 4)
    assert p.agent.target_sync_every == 10_000
    assert (agent.epsilon_start, agent.epsilon_final, agent.epsilon_decay_steps) == (
        1.0,
        0.1,
        1_000_000,
    )
    assert (p.replay.capacity, p.replay.learning_starts) == (1_000_000, 50_000)
    assert (p.train.steps, p.train.checkpoint_every) == (20_000_000, 250_000)
    assert {v for k, v in p.seeds.model_dump().items() if k != "generator"} == {123}
    # where the authors' code and a choice differ, the default is the authors' (docs/fidelity.md)
    assert p.seeds.generator == "authors" and p.agent.target_dtype == "float64"
    assert p.env.sticky_survives_reset and p.train.end_episode_at_evaluation
    assert p.replay.episode_time_wraps and p.start_states.noop_prefix == 2
    assert p.study.runs_per_group == 5 and tuple(p.study.groups) == GROUP_NAMES
    assert (p.evaluation.episodes, p.evaluation.max_frames) == (100, 18_000)
    s = p.start_states
    assert (s.candidates, s.min_length, s.max_length) == (1000, 55, 95)
    assert (s.top_k, s.selected) == (250, 100)


def test_every_knob_in_params_yaml_has_a_source_comment():
    for number, line in enumerate(PARAMS.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and ":" in stripped:
            key, _, value = stripped.partition(":")
            if value.strip() and value.strip() != "{}":
                assert "#" in line, f"params.yaml line {number} has no source comment"


def test_groups_differ_from_deterministic_only_as_the_paper_says():
    p = load_params(PARAMS)
    base = resolve_run(p, "deterministic", 0)
    assert all(
        resolve_run(p, "deterministic", r) == base.model_copy(update={"run": r}) for r in range(5)
    )
    gpu = resolve_run(p, "gpu", 3)
    assert gpu.compute.deterministic_gpu is False
    assert gpu.compute.cpu_reduction_order == "random"  # ignored on CUDA
    assert gpu.seeds == base.seeds and gpu.env == base.env
    env_runs = [resolve_run(p, "environment", r) for r in range(5)]
    assert {c.env.sticky_p for c in env_runs} == {0.25}
    assert {c.agent.epsilon_final for c in env_runs} == {0.01}
    assert [c.seeds.sticky for c in env_runs] == [125, 127, 129, 131, 133]
    for group, seed in [
        ("exploration", "exploration"),
        ("initialization", "init"),
        ("minibatch", "minibatch"),
    ]:
        runs = [resolve_run(p, group, r) for r in range(5)]
        assert [getattr(c.seeds, seed) for c in runs] == [125, 127, 129, 131, 133]
        others = {k: v for k, v in base.seeds.model_dump().items() if k != seed}
        for c in runs:
            assert {k: v for k, v in c.seeds.model_dump().items() if k != seed} == others
            assert c.env == base.env and c.agent == base.agent and c.compute == base.compute


def test_digest_tracks_results_not_names_or_resume_interval():
    p = load_params(PARAMS)
    a = resolve_run(p, "deterministic", 0)
    assert a.digest() == resolve_run(p, "deterministic", 1).digest()
    assert a.digest() == resolve_run(p, "gpu", 0).model_copy(update={"compute": a.compute}).digest()
    moved = load_params(PARAMS, ["train.resume_every=5"])
    assert resolve_run(moved, "deterministic", 0).digest() == a.digest()
    assert resolve_run(p, "exploration", 0).digest() != a.digest()


def test_an_exponent_without_a_dot_is_a_number_on_the_command_line():
    """YAML 1.1 reads 1e-4 as text; a researcher typing --set agent.learning_rate=1e-4
    means the number (and 2.5e-4, which YAML reads as a float, stays one)."""
    params = load_params(PARAMS, ["agent.learning_rate=1e-4", "agent.rmsprop_eps=2.5e-7"])
    assert params.agent.learning_rate == 1e-4 and params.agent.rmsprop_eps == 2.5e-7


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.steps=abc", "train.steps: input should be a valid integer, got 'abc'"),
        ("train.stepz=5", "unknown key 'train.stepz'"),
        ("agent.network=resnet", "agent.network: input should be 'nature' or 'nips'"),
        ("env.sticky_p=1.5", "env.sticky_p: input should be less than 1"),
        ("replay.capacity=-1", "replay.capacity: input should be greater than or equal to 8"),
        ("compute.threads=true", "compute.threads: input should be a valid integer"),
        ("nosection.key=1", "unknown section 'nosection'"),
        ("novalue", "expected key.path=value"),
    ],
)
def test_bad_override_names_the_field(override, fragment):
    with pytest.raises(InputError) as caught:
        load_params(PARAMS, [override])
    message = str(caught.value)
    assert message.startswith(f"--set {override}")
    assert fragment in message and "\n" not in message


def test_bad_params_file_names_the_file_and_field(tmp_path):
    raw = yaml.safe_load(PARAMS.read_text())
    raw["agent"]["discount"] = 2.0
    raw["agent"]["batch_size"] = 0
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as caught:
        load_params(path)
    assert str(caught.value).startswith(f"{path}: agent.discount: ")
    assert "(and 1 more)" in str(caught.value)
    raw["train"]["surprise"] = 1  # a key this version does not know: every such key named
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=f"^{path}: does not know train.surprise \\("):
        load_params(path)
    path.write_text("env: [unclosed\n")
    with pytest.raises(InputError, match="is not valid YAML"):
        load_params(path)
    with pytest.raises(InputError, match="no such params file"):
        load_params(tmp_path / "missing.yaml")


def test_study_rejects_too_few_seeds_and_unknown_groups(tmp_path):
    with pytest.raises(InputError, match="lists 5 seeds for 6 runs"):
        load_params(PARAMS, ["study.runs_per_group=6"])
    raw = yaml.safe_load(PARAMS.read_text())
    raw["study"]["groups"]["dropout"] = {}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match="unknown group 'dropout'"):
        load_params(path)
    with pytest.raises(InputError, match="--run 5: expected 0..4"):
        resolve_run(load_params(PARAMS), "deterministic", 5)


def test_a_group_can_be_left_out():
    params = load_params(PARAMS, ["study.runs_per_group=2", "study.left_out=[gpu]"])
    assert params.study.studied_groups() == [g for g in GROUP_NAMES if g != "gpu"]
    assert params.study.run_ids()[:3] == [
        ("deterministic", 0),
        ("deterministic", 1),
        ("environment", 0),
    ]
    assert len(params.study.run_ids()) == 2 * 5
    with pytest.raises(InputError, match="--group gpu: left out of this study"):
        resolve_run(params, "gpu", 0)
    with pytest.raises(InputError, match="unknown group 'cpu'"):
        load_params(PARAMS, ["study.left_out=[cpu]"])
    with pytest.raises(InputError, match="the deterministic group must be trained"):
        load_params(PARAMS, ["study.left_out=[deterministic]"])


def test_cli_reports_bad_input_in_one_line_without_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "train",
            "--group",
            "deterministic",
            "--run",
            "0",
            "--params",
            str(PARAMS),
            "--set",
            "train.steps=-5",
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "reprodqn: error: --set train.steps=-5: train.steps: input should be greater than or "
        "equal to 1, got -5"
    ]
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_mistyped_key_gets_the_nearest_valid_one():
    with pytest.raises(
        InputError,
        match=r"unknown key 'agent.batchsize'; did you mean "
        r"'agent.batch_size'\?",
    ):
        load_params(PARAMS, ["agent.batchsize=3"])
    with pytest.raises(
        InputError,
        match=r"unknown section 'replya'; did you mean "
        r"'replay.capacity'\?",
    ):
        load_params(PARAMS, ["replya.capacity=3"])
    with pytest.raises(InputError, match=r"unknown key 'zzz'$"):  # nothing close: no guess
        load_params(PARAMS, ["zzz=1"])


def test_explain_prints_every_knob_with_type_range_default_value_and_source():
    from reprodqn.config.explain import explain
    from reprodqn.config.params import AgentConfig

    params = load_params(PARAMS, ["agent.batch_size=8"])
    text = explain(params, PARAMS, "agent")
    assert text.startswith("[agent]  The DQN")
    for key in AgentConfig.model_fields:  # every knob, none invented
        assert f"  agent.{key}: " in text
    assert text.count("\n  agent.") == len(AgentConfig.model_fields)
    assert "agent.batch_size: int >= 1; default 32; now 8" in text
    assert "agent.network: one of nature, nips; default 'nature'" in text
    assert "      Transitions per update." in text  # config.py's description
    assert "      source: code HEAD (2018 code: 1.0e-4)" in text  # params.yaml's comment
    # a comment carried on under its knob is read whole, and so is a summary's first paragraph
    assert "source: code: torch.optim.RMSprop, eps after the square root (DeepMind 2015:" in text
    everything = explain(params, PARAMS)
    assert all(f"[{section}]" in everything for section in ("env", "seeds", "ranker"))
    assert "CPU ISA, and the GPU path's speed options.\n" in everything
    assert "source: ours: null trains the ranker here" in everything  # not the next knob's
    # a group's own fields, with the groups that set them
    assert "study.groups.<name>.vary: one of init, exploration" in everything
    assert "study.groups.<name>.seeds: list of int >= 0 <" in everything
    assert "now {'gpu': {'compute.deterministic_gpu': False" in everything
    with pytest.raises(InputError, match="--explain nope: expected one of env, agent"):
        explain(params, PARAMS, "nope")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_infinities_are_refused_in_every_float_wherever_set(value, tmp_path):
    """A NaN probability or learning rate would train silently wrong; refused in one line."""
    with pytest.raises(
        InputError,
        match=rf"--set agent.learning_rate={value}: "
        rf"agent.learning_rate: input should be a finite number",
    ):
        load_params(PARAMS, [f"agent.learning_rate={value}"])
    with pytest.raises(
        InputError,
        match=r"study.groups.environment.set.env.sticky_p: input "
        r"should be a finite number, got -?(nan|inf)$",
    ):
        load_params(PARAMS, [f"study.groups.environment.set={{env.sticky_p: {value}}}"])
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"env:\n  reward_clip: {value}\n")
    with pytest.raises(InputError, match=r"env.reward_clip: input should be a finite number"):
        load_params(PARAMS, overlay=overlay)
    broken = tmp_path / "params.yaml"
    broken.write_text((PARAMS).read_text().replace("discount: 0.99 ", f"discount: {value} "))
    with pytest.raises(InputError, match=rf"{broken}: agent.discount: input should be a finite"):
        load_params(broken)


def test_params_yaml_departs_from_no_default_of_the_models(tmp_path):
    """The models' defaults are the one source of the paper's values; params.yaml states
    them with their sources and must never say otherwise."""
    from reprodqn.config.explain import departures

    assert departures(load_params(PARAMS)) == []
    changed = tmp_path / "params.yaml"
    changed.write_text(PARAMS.read_text().replace("  steps: 20000000 ", "  steps: 10000000 ", 1))
    assert [d["key"] for d in departures(load_params(changed))] == ["train.steps"]


def test_a_check_across_fields_is_blamed_on_the_override_it_names():
    with pytest.raises(InputError) as refused:
        load_params(PARAMS, ["evaluation.episodes=200"])
    assert str(refused.value) == (
        "--set evaluation.episodes=200: evaluation.episodes (200) exceeds "
        "start_states.selected (100)"
    )


def test_a_check_across_fields_is_not_blamed_on_a_key_it_only_contains():
    """`a.b` overridden, a check naming `a.bc` and `x.a.b`: the file is blamed, not `a.b`."""

    class Pair(BaseModel):
        bc: int = 0

        @model_validator(mode="after")
        def check(self):
            raise ValueError("a.bc (0) exceeds x.a.b (0)")

    with pytest.raises(ValidationError) as refused:
        Pair()
    assert one_line(refused.value, "params.yaml", {"a.b": "--set a.b=1"}) == (
        "params.yaml: a.bc (0) exceeds x.a.b (0)"
    )
    named = one_line(refused.value, "params.yaml", {"a.bc": "--set a.bc=0"})
    assert named.startswith("--set a.bc=0: ")
