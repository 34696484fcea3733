"""The GPU path's speed options (compute.replay_on_device, compute.cuda_graphs) change how a
run is computed, never its chain. On a CPU the device replay runs for real; the graphs'
warm-up, restore and static buffers run eagerly (CudaGraphs(capture=False)), and asking
for real graphs is refused in one line. On a GPU, gpu-check holds both to the chain."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

from reprodqn.config.params import load_params, resolve_run
from reprodqn.core.errors import InputError
from reprodqn.dqn.cuda_graphs import CudaGraphs
from reprodqn.dqn.device_replay import DeviceReplayMemory
from reprodqn.training import loop
from tests.helpers import (
    CENTERED,
    PARAMS,
    TINY,
    cli_env,
    stop_after_first_resume_point,
    train_command,
    train_tiny,
)

# the speed options are the standard numerics' (the universal mode refuses them)
STANDARD = [*TINY, "compute.numerics=standard"]
DEVICE_REPLAY = ["compute.replay_on_device=true"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The tiny deterministic run on the host replay, trained once for this module."""
    return train_tiny(load_params(PARAMS, STANDARD), tmp_path_factory.mktemp("plain"))


def eager_graphs(monkeypatch) -> list[CudaGraphs]:
    """Every run built from here on gets the graphs' code run eagerly, on the CPU."""
    made: list[CudaGraphs] = []

    def graphs(replay, agent, device):
        made.append(CudaGraphs(agent, replay, capture=False))
        return made[-1]

    monkeypatch.setattr(loop, "cuda_graphs", graphs)
    return made


def with_graphs(params):
    """The params with compute.cuda_graphs set past the config's device check (the CPU
    refuses it; `eager_graphs` stands in for the capture)."""
    compute = params.compute.model_copy(update={"cuda_graphs": True})
    return params.model_copy(update={"compute": compute})


def test_device_replay_gives_the_host_replays_chain(plain, tmp_path):
    params = load_params(PARAMS, [*STANDARD, *DEVICE_REPLAY])
    config = resolve_run(params, "deterministic", 0)
    assert (
        config.digest() == resolve_run(load_params(PARAMS, STANDARD), "deterministic", 0).digest()
    )
    assert train_tiny(params, tmp_path) == plain


def test_device_replay_gathers_the_host_replays_bytes():
    host = loop.ReplayMemory(300, 4, 84)
    device = DeviceReplayMemory(300, 4, 84, torch.device("cpu"))
    frames = np.random.default_rng(0).integers(0, 256, (250, 84, 84), dtype=np.uint8)
    for t, frame in enumerate(frames):
        for memory in (host, device):
            memory.add(frame, t % 4, float(t % 3 - 1), t % 37 == 36, t % 37)
    indices = np.array([5, 40, 41, 120, 248])
    want, got = host.transitions(indices), device.transitions(indices)
    for key in ("states", "next_states", "actions", "rewards", "terminals"):
        assert np.array_equal(np.asarray(want[key]), got[key].numpy()), key
    assert got["actions"].dtype == torch.int64 and got["rewards"].dtype == torch.float32


@pytest.mark.parametrize("optimizer", [[], CENTERED], ids=["rmsprop", "rmsprop_centered"])
def test_graph_code_gives_the_plain_chain(plain, tmp_path, monkeypatch, optimizer):
    """Warm-up updates, then the state written back in place, then every update through
    the static buffers: the plain run's chain (for centred RMSProp, its own plain chain)."""
    made = eager_graphs(monkeypatch)
    base = load_params(PARAMS, [*STANDARD, *optimizer])
    want = plain if not optimizer else train_tiny(base, tmp_path / "plain")
    params = with_graphs(load_params(PARAMS, [*STANDARD, *optimizer, *DEVICE_REPLAY]))
    assert train_tiny(params, tmp_path / "graphs") == want
    assert made and made[0]._update is not None and made[0]._act is not None


def test_graph_code_resumes_to_the_plain_chain(plain, tmp_path, monkeypatch):
    """A resume point gives the optimizer new tensors: the graphs are prepared again."""
    eager_graphs(monkeypatch)
    params = with_graphs(load_params(PARAMS, [*STANDARD, *DEVICE_REPLAY]))
    stop_after_first_resume_point(params, tmp_path)
    assert train_tiny(params, tmp_path) == plain


def learning_run(run_dir) -> loop.Run:
    """The tiny run on the device replay, 60 steps past the start of learning."""
    params = load_params(PARAMS, [*STANDARD, *DEVICE_REPLAY])
    run = loop.Run(resolve_run(params, "deterministic", 0), run_dir, torch.device("cpu"))
    while run.step < 260:
        run.advance()
    return run


def test_warm_up_leaves_no_trace_in_the_run(tmp_path):
    """After the warm-up updates, weights, target and optimizer state are as before."""
    run = learning_run(tmp_path)
    before = run.agent.tensors()
    graphs = CudaGraphs(run.agent, run.replay, capture=False)
    graphs.update(run.replay.sample_indices(8, run.streams["minibatch"]))
    after = run.agent.tensors()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    # one real update: every online weight and its square average move, the target not
    assert changed and not [k for k in changed if k.startswith("target.")]
    assert {k for k in after if k.startswith("optimizer.") and k.endswith(".step")} <= set(changed)
    assert all(float(after[k]) == float(before.get(k, 0)) + 1 for k in after if k.endswith(".step"))


class RefusedCapture:
    """torch.cuda.graph as it fails: the body's first op refused while capturing, then
    ending the capture raising an error of its own (torch leaves its stream current)."""

    active = False
    stream_restored = False

    def __init__(self, graph):
        self.stream_ctx = CaptureStream()

    def __enter__(self):
        RefusedCapture.active = True

    def __exit__(self, *exc):
        RefusedCapture.active = False
        raise RuntimeError("operation failed due to a previous error during capture")


class CaptureStream:
    def __exit__(self, *exc):
        RefusedCapture.stream_restored = True


def test_a_capture_that_fails_says_why_and_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """Warm-up updates ran, then capture was refused: one line naming the option and
    torch's first reason, not the later one; weights and optimizer state go back."""
    run = learning_run(tmp_path)
    before = run.agent.tensors()
    graphs = CudaGraphs(run.agent, run.replay, capture=True)
    eager_body = CudaGraphs._update_body

    def body(self):
        if RefusedCapture.active:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return eager_body(self)

    monkeypatch.setattr(CudaGraphs, "_update_body", body)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)
    monkeypatch.setattr(torch.cuda, "graph", RefusedCapture)
    with pytest.raises(InputError) as refused:
        graphs.update(run.replay.sample_indices(8, run.streams["minibatch"]))
    assert RefusedCapture.stream_restored  # the stream current before capture, again
    message = str(refused.value)
    assert message.startswith("compute.cuda_graphs: ") and "\n" not in message
    assert "not permitted when stream is capturing" in message and "previous error" not in message
    assert "test_speed_options.py" in message  # where it came from
    after = run.agent.tensors()
    assert set(after) >= set(before)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(not after[k].any() for k in set(after) - set(before))  # new state: its start


def test_the_gpu_group_still_parts_on_the_device_replay(plain, tmp_path):
    """Its emulated kernels (rows summed in an order drawn anew) run on the gathered batch:
    its two runs agree until updates start, then part, as on the host replay."""
    params = load_params(PARAMS, [*STANDARD, *DEVICE_REPLAY])
    first = train_tiny(params, tmp_path / "a", group="gpu")
    second = train_tiny(params, tmp_path / "b", group="gpu")
    before_updates = [line for line in plain if line["updates"] == 0]
    assert first[: len(before_updates)] == second[: len(before_updates)] == before_updates
    assert first[-1]["weights_sha256"] != second[-1]["weights_sha256"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["compute.cuda_graphs=true"], "compute.cuda_graphs: true needs compute.replay_on_device"),
        (
            ["compute.cuda_graphs=true", "compute.replay_on_device=true", "compute.device=cpu"],
            "compute.cuda_graphs: true needs a CUDA device",
        ),
        (
            ["compute.cuda_graphs=true", "compute.replay_on_device=true", "agent.optimizer=adam"],
            "needs agent.optimizer rmsprop or rmsprop_centered",
        ),
        ([*DEVICE_REPLAY, "replay.prioritized=true"], "needs replay.prioritized: false"),
        ([*DEVICE_REPLAY, "agent.n_step=3"], "needs agent.n_step: 1"),
    ],
)
def test_options_are_refused_where_they_cannot_run(overrides, message):
    with pytest.raises(InputError, match=message):
        load_params(PARAMS, [*STANDARD, *overrides])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU's refusal")
def test_cuda_graphs_on_a_cpu_are_refused_in_one_line(tmp_path):
    """compute.device auto resolves to the CPU here: the run refuses, one line, exit 2."""
    argv = train_command(tmp_path, [*STANDARD, *DEVICE_REPLAY, "compute.cuda_graphs=true"])
    done = subprocess.run(argv, capture_output=True, text=True, env=cli_env())
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "reprodqn: error: compute.cuda_graphs: true needs a CUDA device; this run's "
        "compute.device resolved to cpu (set compute.cuda_graphs: false on a CPU)"
    )
    assert "Traceback" not in done.stderr
