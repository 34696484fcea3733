"""The local executor: jobs in their own processes, pinned, with a stated environment;
failures named; progress across runs."""

from __future__ import annotations

import json
import os

import pytest

from reprodqn.core.errors import InputError
from reprodqn.study import launch
from tests.helpers import PARAMS


def test_jobs_run_pinned_to_their_own_core_with_a_stated_environment(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SOMETHING_UNRELATED", "leak")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    env = launch.job_environment(threads=1)
    assert "SOMETHING_UNRELATED" not in env
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONHASHSEED"] and env["CUBLAS_WORKSPACE_CONFIG"]
    jobs = [
        launch.Job(
            f"job/{i}",
            ["conditions", "--params", str(PARAMS), "--out-dir", str(tmp_path / str(i))],
            env,
        )
        for i in range(2)
    ]
    results = launch.LocalExecutor(2).run(jobs, "test")
    launch.check(results, "test")
    usable = [
        json.loads((tmp_path / str(i) / "conditions.json").read_text())["cpu"]["usable_cores"]
        for i in range(2)
    ]
    if len(os.sched_getaffinity(0)) >= 2:
        assert usable == [1, 1]  # each job pinned to its own core, and it says so
    records = [json.loads((tmp_path / str(i) / "conditions.json").read_text()) for i in (0, 1)]
    assert all(r["numerics"]["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" for r in records)
    err = capfd.readouterr().err
    assert "test: 2 jobs, 2 workers" in err and "2/2 jobs" in err and "ETA" in err


def test_a_failed_job_is_named_and_the_others_still_run(tmp_path):
    env = launch.job_environment(threads=1)
    jobs = [
        launch.Job(
            "good/0", ["params", "--params", str(PARAMS), "--out", str(tmp_path / "ok.yaml")], env
        ),
        launch.Job(
            "bad/1",
            [
                "params",
                "--params",
                str(PARAMS),
                "--set",
                "train.steps=-1",
                "--out",
                str(tmp_path / "bad.yaml"),
            ],
            env,
        ),
    ]
    results = launch.LocalExecutor(1, log_dir=tmp_path / "logs").run(jobs, "test")
    assert (tmp_path / "ok.yaml").exists()
    with pytest.raises(InputError, match=r"test: 1 of 2 jobs failed: bad/1 \(log .*bad-1.log\)"):
        launch.check(results, "test")
    assert "train.steps" in (tmp_path / "logs" / "bad-1.log").read_text()


def test_the_papers_scale_on_a_cpu_says_what_it_costs_before_training():
    from reprodqn.config.params import load_params
    from reprodqn.study.stages import cpu_cost_warning

    paper = load_params(PARAMS)
    warning = cpu_cost_warning(paper, runs=30, workers=2, measured=None)
    assert "about 1,190 hours" in warning and "`make laptop`" in warning
    assert "about 595 hours" in cpu_cost_warning(paper, 30, 2, measured=140.0)
    smoke = load_params(PARAMS, ["train.steps=3000"])
    assert cpu_cost_warning(smoke, runs=12, workers=2, measured=None) is None


def test_plain_train_runs_in_the_launch_environment_a_study_job_gets(tmp_path):
    """`reprodqn train` ran with the shell's OMP_NUM_THREADS, MKL_NUM_THREADS and
    PYTHONHASHSEED (none, here), `study train` with stated ones, so the same run's two
    launches differed among "all conditions that differ"."""
    import subprocess

    from tests.helpers import TINY, cli_env, train_command

    shell = cli_env()
    for name in ("PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        shell.pop(name, None)
    steps = ["train.steps=200", "train.checkpoint_every=100", "train.resume_every=200"]
    done = subprocess.run(
        train_command(tmp_path, [*TINY, *steps]), env=shell, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((tmp_path / "deterministic" / "0" / "conditions.json").read_text())
    stated = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert {name: recorded["numerics"]["environment"][name] for name in stated} == stated
    assert launch.launch_environment(threads=1) | stated == launch.launch_environment(1)
