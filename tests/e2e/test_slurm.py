"""The study on a real single-node Slurm (.ci/slurm/start): the same hash chains as the
local executor; a preempted training job requeues, resumes and ends bitwise identical to an
uninterrupted run; bad launcher settings are one line before anything is submitted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from reprodqn.config.study import GROUP_NAMES as GROUPS
from reprodqn.core.errors import InputError
from tests.helpers import PARAMS, TINY, TINY_OVERLAY, cli_env, write_params

pytestmark = pytest.mark.slurm

TINY_STUDY = {**TINY_OVERLAY, "study": {"runs_per_group": 1}}


@pytest.fixture(scope="module", autouse=True)
def slurm_is_up():
    try:
        up = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
        ok = up.returncode == 0 and up.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        if os.environ.get("REPRODQN_REQUIRE_SLURM") == "1":
            pytest.fail("Slurm is not running (.ci/slurm/start)")
        pytest.skip("no Slurm here; .ci/slurm/start starts one (as root)")


def env() -> dict:
    return cli_env(REPRODQN_TRACKING="0")


def workspace(root: Path, overlay: dict, launcher: dict | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    overlay_file, out = str(root / "overlay.yaml"), str(root / "params.yaml")
    write_params("--params", str(PARAMS), "--overlay", overlay_file, "--out", out, env=env())
    if launcher is not None:
        (root / "launcher.yaml").write_text(yaml.safe_dump(launcher))
    return root


def queued_jobs() -> set[str]:
    """Ids of every job Slurm still lists (a finished job may linger while its epilog runs)."""
    return set(
        subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True
        ).stdout.split()
    )


def study(root: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", "study", "train", *extra],
        cwd=root,
        capture_output=True,
        text=True,
        env=env(),
    )


def test_a_study_through_slurm_has_the_local_executors_hash_chains(tmp_path):
    slurm = workspace(
        tmp_path / "slurm", TINY_STUDY, {"partition": "main", "time_limit_minutes": 60}
    )
    local = workspace(tmp_path / "local", TINY_STUDY)
    through_slurm = study(slurm, "--launcher", "slurm")
    assert through_slurm.returncode == 0, through_slurm.stderr[-3000:]
    assert "submitted to Slurm as array" in through_slurm.stderr
    assert "6/6 jobs" in through_slurm.stderr
    assert study(local, "--launcher", "local").returncode == 0
    for group in GROUPS:
        ours = slurm / "runs" / group / "0"
        chain = (ours / "hashes.jsonl").read_text().splitlines()
        local_chain = (local / "runs" / group / "0" / "hashes.jsonl").read_text().splitlines()
        conditions = json.loads((ours / "conditions.json").read_text())
        if conditions["numerics"]["cpu_reduction_order"] == "random":
            # the gpu group on a CPU: the same start, then parted by its random reduction order
            assert chain[0] == local_chain[0] and chain[-1] != local_chain[-1], group
        else:
            assert chain == local_chain, group
        assert conditions["numerics"]["environment"]["PYTHONHASHSEED"] == "0"
        assert conditions["numerics"]["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def job_state(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


DRIVER = """
import json, sys
from pathlib import Path
from reprodqn.study import launch
from reprodqn.study import slurm
from reprodqn.cli.main import main
settings = slurm.LauncherSettings(**json.loads(sys.argv[1]))
job = launch.Job("deterministic/0", json.loads(sys.argv[2]), launch.job_environment(1))
executor = slurm.SlurmExecutor(settings, cores_per_job=1, workspace=Path.cwd(), entry=main)
launch.check(executor.run([job], "preemption"), "preemption")
"""


def test_a_preempted_training_job_requeues_resumes_and_ends_bitwise_identical(tmp_path):
    # long enough to be preempted mid-run (the preemption comes right after the first resume
    # point, step 1,000); cpus_per_run=2 fills the node so `urgent` must preempt it
    overrides = [
        *TINY,
        "train.steps=8000",
        "train.checkpoint_every=2000",
        "train.resume_every=1000",
        "train.log_every=500",
    ]
    runs = tmp_path / "runs"
    argv = ["train", "--group", "deterministic", "--run", "0", "--params", str(PARAMS), "--restart"]
    for item in overrides:
        argv += ["--set", item]
    # the uninterrupted run, through the same command (and so the same CPU floor)
    subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", *argv, "--runs-dir", str(tmp_path / "reference")],
        check=True,
        capture_output=True,
        env=env(),
    )
    reference = [
        json.loads(x)
        for x in (tmp_path / "reference" / "deterministic" / "0" / "hashes.jsonl")
        .read_text()
        .splitlines()
    ]
    argv += ["--runs-dir", str(runs)]
    settings = {
        "partition": "main",
        "time_limit_minutes": 120,
        "cpus_per_run": 2,
        "log_dir": str(tmp_path / "logs"),
    }  # long enough not to count as a timeout
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(settings), json.dumps(argv)],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run_dir = runs / "deterministic" / "0"
    job_id = None
    try:
        job_id = wait_for(
            lambda: next(
                (
                    line.split()[0]
                    for line in subprocess.run(
                        ["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True
                    ).stdout.splitlines()
                    if "preemption" in line and "RUNNING" in line
                ),
                None,
            ),
            120,
            "the job to run",
        )
        wait_for(lambda: (run_dir / "resume" / "latest.json").exists(), 180, "a resume point")
        urgent = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                "urgent",
                "-c",
                "2",
                "-o",
                str(tmp_path / "urgent.out"),
                "--wrap",
                "sleep 5",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        wait_for(lambda: job_state(job_id).get("Restarts", "0") != "0", 180, "the preemption")
        # Slurm holds a requeued job for 2 minutes; let it start once the node is free
        wait_for(
            lambda: job_state(urgent).get("JobState") == "COMPLETED" or not job_state(urgent),
            120,
            "the urgent job",
        )
        subprocess.run(
            ["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True
        )
        output, _ = driver.communicate(timeout=600)
        # the next test compares the queue before and after: leave it as this test found it
        wait_for(
            lambda: job_id.split("_")[0] not in {j.split("_")[0] for j in queued_jobs()},
            60,
            "the job to leave the queue",
        )
    finally:
        if driver.poll() is None:
            driver.kill()
            if job_id:
                subprocess.run(["scancel", job_id.split("_")[0]], capture_output=True)
    assert driver.returncode == 0, output[-3000:]
    assert "1/1 jobs" in output
    log = "".join(p.read_text() for p in (tmp_path / "logs").rglob("*_log.*"))
    assert "this job is preempted" in log  # submitit saw a preemption, not a timeout
    assert "DUE TO PREEMPTION" in log or "DUE TO JOB REQUEUE" in log
    assert "resumed at step" in log
    assert [json.loads(x) for x in (run_dir / "hashes.jsonl").read_text().splitlines()] == reference


@pytest.mark.parametrize(
    "launcher, message",
    [
        ({"partition": "nowhere"}, "partition 'nowhere' is not a Slurm partition here"),
        (
            {"munge_check": ["munge", "-n", "--socket", "/nonexistent/munge.socket"]},
            "munge could not create a credential",
        ),
        (
            {"time_limit_minutes": 1, "steps_per_second": 1},
            "time_limit_minutes=1 is below one resume interval",
        ),
        ({"partition": "main", "gpus": 1}, "launcher.yaml: gpus: unknown key"),
    ],
)
def test_bad_launcher_settings_are_one_line_before_anything_is_submitted(
    tmp_path, launcher, message
):
    root = workspace(tmp_path / "w", TINY_STUDY, launcher)
    before = queued_jobs()
    result = study(root, "--launcher", "slurm")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("reprodqn: error: ") and message in line
    assert queued_jobs() <= before  # nothing submitted (an earlier job may have left)
    assert not (root / "runs").exists() and not (root / "logs").exists()


def test_launcher_settings_are_validated():
    from reprodqn.study.slurm import load_launcher_settings

    with pytest.raises(InputError, match="no such launcher settings file"):
        load_launcher_settings(Path("/nonexistent/launcher.yaml"))
    assert shutil.which("sbatch")


def test_a_job_that_fails_is_not_retried_and_the_run_is_named_with_its_log(tmp_path):
    driver = """
import json, sys
from pathlib import Path
from reprodqn.study import launch
from reprodqn.study import slurm
from reprodqn.cli.main import main
settings = slurm.LauncherSettings(partition="main", time_limit_minutes=30,
                                  log_dir=sys.argv[1])
jobs = [launch.Job("initialization/3", ["train", "--group", "initialization", "--run", "9",
                                        "--params", sys.argv[2]], launch.job_environment(1))]
results = slurm.SlurmExecutor(settings, cores_per_job=1, workspace=Path.cwd(), entry=main).run(jobs,
                                                                               "study")
launch.check(results, "study")
"""
    result = subprocess.run(
        [sys.executable, "-c", driver, str(tmp_path / "logs"), str(PARAMS)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert result.returncode != 0
    assert "study: 1 of 1 jobs failed: initialization/3 (log " in result.stderr
    logs = list((tmp_path / "logs").rglob("*_log.err"))
    assert len(logs) == 1 and "--run 9: expected 0..4" in logs[0].read_text()
    assert "Requeued" not in "".join(p.read_text() for p in (tmp_path / "logs").rglob("*_log.*"))
