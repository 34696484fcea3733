"""study/gpu_launch.py: the launch settings of runs sharing a GPU reach each run's
process (its core, its environment), a run the MPS daemon never saw is named, the settings
go into the record, and blocking sync asks the CUDA driver for it before torch does."""

from __future__ import annotations

import json
import os
import sys

import pytest

from reprodqn.cli import main as cli
from reprodqn.core.errors import InputError
from reprodqn.study import gpu_launch, mps

# each "run" writes the cores it may run on and the settings its environment carries
PROBE = (
    "import json, os, sys; json.dump({'cores': sorted(os.sched_getaffinity(0)), "
    "'blocking': os.environ.get('REPRODQN_CUDA_BLOCKING_SYNC'), "
    "'pipe': os.environ.get('CUDA_MPS_PIPE_DIRECTORY')}, "
    "open(os.path.join(sys.argv[1], sys.argv[-1] + '.json'), 'w'))"
)


@pytest.fixture
def probe_runs(monkeypatch):
    """Each launched run is PROBE instead of `reprodqn train`, given its runs folder."""
    monkeypatch.setattr(
        gpu_launch,
        "command",
        lambda name, params, overrides, runs_dir: [sys.executable, "-c", PROBE, str(runs_dir)],
    )


def launched(launcher, tmp_path, k: int) -> list[dict]:
    launcher([("deterministic", i) for i in range(k)], None, [], tmp_path, tmp_path / "log")
    return [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(k)]


def test_pinned_each_run_starts_on_a_core_of_its_own(probe_runs, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    runs = launched(gpu_launch.Launcher(gpu_launch.Settings(pin=True)), tmp_path, 3)
    # round the cores this process may use, one each, from before the run starts
    assert [run["cores"] for run in runs] == [[cores[i % len(cores)]] for i in range(3)]
    unpinned = launched(gpu_launch.Launcher(gpu_launch.AS_BEFORE), tmp_path, 2)
    assert all(run["cores"] == cores for run in unpinned)
    assert all(run["blocking"] is None and run["pipe"] is None for run in unpinned)


def test_each_run_gets_the_blocking_sync_and_the_daemons_pipe(probe_runs, tmp_path):
    daemon = mps.Daemon("unused", tmp_path / "mps")
    (tmp_path / "mps" / "log").mkdir(parents=True)
    launcher = gpu_launch.Launcher(gpu_launch.Settings(mps=True, blocking_sync=True), daemon)
    runs = launched(launcher, tmp_path, 2)
    assert all(run["blocking"] == "1" for run in runs)
    assert all(run["pipe"] == str(tmp_path / "mps" / "pipe") for run in runs)


def test_a_run_that_never_attached_is_named_and_recorded(monkeypatch, tmp_path, capsys):
    daemon = mps.Daemon("unused", tmp_path)
    (tmp_path / "log").mkdir()

    def launch(runs, params, overrides, runs_dir, log, env, cores, pids):
        pids.extend([501, 502])  # the daemon saw only the first, and the second failed
        daemon.control_log.write_text("[t Control 9] NEW CLIENT 501 from user 0: ...\n")
        raise InputError("gpu-check: a training run failed (exit [0, 1])")

    monkeypatch.setattr(gpu_launch, "launch", launch)
    launcher = gpu_launch.Launcher(gpu_launch.Settings(mps=True), daemon)
    with pytest.raises(InputError, match="a training run failed"):
        launcher([("deterministic", 0), ("deterministic", 1)], None, [], tmp_path, tmp_path / "x")
    line = (
        f"mps: run 1 of 2 in {tmp_path} (pid 502) never attached to the MPS daemon: it ran "
        "without MPS"
    )
    assert capsys.readouterr().err.splitlines() == [line]
    record = launcher.record()
    assert record == {
        "mps": {"asked": True, "used": True, "unattached": [line]},
        "blocking_sync": False,
        "pinned_to": None,
    }
    assert gpu_launch.describe(record).startswith("The runs sharing the device: under MPS, 1 runs")


def test_the_record_holds_the_settings_as_they_ran(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control here
    settings = gpu_launch.Settings(mps=True, blocking_sync=True, pin=True)
    with gpu_launch.sharing(settings, "cuda") as launcher:
        record = launcher.record()
    assert record == {
        "mps": {"asked": True, "used": False, "unattached": []},
        "blocking_sync": True,
        "pinned_to": sorted(os.sched_getaffinity(0)),
    }
    assert gpu_launch.describe(record) == (
        "The runs sharing the device: without MPS, asked for but not at hand (the log says "
        "why); waiting on it by blocking; each pinned to a core of its own."
    )


class FakeDriver:
    """libcuda's entry points that blocking sync calls, with two devices."""

    def __init__(self):
        self.calls: list[tuple] = []

    def cuInit(self, flags):
        self.calls.append(("cuInit", flags))
        return 0

    def cuDeviceGetCount(self, count):
        count._obj.value = 2
        return 0

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = 10 + ordinal
        return 0

    def cuDevicePrimaryCtxSetFlags(self, device, flags):
        self.calls.append(("flags", device.value, flags))
        return 0


def test_blocking_sync_is_set_on_every_devices_primary_context():
    driver = FakeDriver()
    assert gpu_launch.apply_blocking_sync(lambda name: driver) is None
    assert driver.calls == [("cuInit", 0), ("flags", 10, 4), ("flags", 11, 4)]

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    assert gpu_launch.apply_blocking_sync(no_driver) == (
        "blocking sync: no CUDA driver (libcuda.so.1); waiting as the driver chooses"
    )


def test_the_cli_asks_for_blocking_sync_before_any_command(monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(gpu_launch, "apply_blocking_sync", lambda: asked.append(1) or "why")
    monkeypatch.delenv(gpu_launch.BLOCKING_SYNC, raising=False)
    cli.main(["verify", "--params", "no-such-params.yaml"])
    assert not asked
    monkeypatch.setenv(gpu_launch.BLOCKING_SYNC, "1")
    cli.main(["verify", "--params", "no-such-params.yaml"])
    assert asked == [1] and "reprodqn: why" in capsys.readouterr().err
