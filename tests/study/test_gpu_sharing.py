"""gpu_sharing: the rate after annealing read from a run's process records, and a sweep in
which one path fails keeps what was measured and says why."""

from __future__ import annotations

import json

import pytest

from reprodqn.core import workspace
from reprodqn.core.errors import InputError
from reprodqn.study import gpu_sharing
from tests.helpers import PARAMS


def write_run(run_dir, records) -> None:
    run_dir.mkdir(parents=True)
    lines = [json.dumps(r) for r in records]
    (run_dir / workspace.PROCESS).write_text("\n".join(lines) + "\n")
    (run_dir / workspace.HASHES).write_text(json.dumps({"step": records[-1]["step"]}) + "\n")


RECORDS = [  # epsilon reaches 0.1 at step 300: the intervals from 300 on count
    {"step": 100, "epsilon": 1.0, "steps_per_second": 1000.0},
    {"step": 200, "epsilon": 0.5, "steps_per_second": 500.0},
    {"step": 300, "epsilon": 0.1, "steps_per_second": 400.0},
    {"step": 400, "epsilon": 0.1, "steps_per_second": 100.0},
    {"step": 600, "epsilon": 0.1, "steps_per_second": 400.0},
]


def test_the_annealed_rate_weighs_each_interval_by_its_steps(tmp_path):
    write_run(tmp_path / "run", RECORDS)
    # 300 steps in 100/100 + 200/400 = 1.5 s
    assert gpu_sharing.annealed_rate(tmp_path / "run") == pytest.approx(200.0)
    write_run(tmp_path / "never", RECORDS[:2])  # never annealed: no rate
    assert gpu_sharing.annealed_rate(tmp_path / "never") is None


def test_a_path_that_fails_keeps_the_others_figures_and_its_reason(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: operation not permitted when stream is capturing\n")

    launched, progress = [], []

    def launch(runs, params, overrides, runs_dir, log_path):
        launched.append((runs_dir.parent.name, len(runs)))
        if "compute.replay_on_device=true" in overrides and len(runs) > 1:
            raise InputError("gpu-check: a training run failed (exit [1, 1])")
        for group, run, folder in runs:  # --run takes only the group's indices (0..4)
            assert run < 5 and folder.parent == runs_dir
            write_run(workspace.run_dir(folder, group, run), RECORDS)
        return 2.0

    swept = gpu_sharing.sweep(
        launch,
        PARAMS,
        [],
        "cpu",
        [1, 2, 8],  # 8: past the group's 5 runs, copies of them in folders of their own
        tmp_path,
        log,
        lambda so_far: progress.append(
            {path: sorted(by_k) for path, by_k in so_far["rates"].items()}
        ),
    )
    # both paths at each K before the next; the failed path is not tried again
    assert launched == [("standard", 1), ("fast", 1), ("standard", 2), ("fast", 2), ("standard", 8)]
    assert progress == [
        {"standard": ["1"], "fast": ["1"]},
        {"standard": ["1", "2"], "fast": ["1", "failed"]},
        {"standard": ["1", "2", "8"], "fast": ["1", "failed"]},
    ]
    assert swept["rates"]["standard"]["2"]["annealed"] == pytest.approx(400.0)
    assert swept["rates"]["standard"]["2"]["whole_runs"] == pytest.approx(600.0)
    fast = swept["rates"]["fast"]
    assert set(fast) == {"1", "failed"} and "stream is capturing" in fast["failed"]
    table = "\n".join(gpu_sharing.table(swept["rates"]))
    assert "| fast | failed: gpu-check: a training run failed (exit [1, 1]) |" in table
    assert gpu_sharing.best_sharing(swept["rates"]) == ("standard", 8, pytest.approx(1600.0))
    assert len(swept["chains"]["standard"]["8"]) == 8
