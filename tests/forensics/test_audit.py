"""The nondeterminism audit: every aten op the study runs, classified by torch's own
documentation, and the global-RNG, thread, ISA and CUDA settings it rests on."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from reprodqn.config.params import resolve_run
from reprodqn.forensics import audit, optable


def test_the_op_table_is_for_the_installed_torch():
    assert torch.__version__.split("+")[0] == optable.TORCH_VERSION, (
        "optable.py was transcribed for another torch: re-read the docs and update it"
    )
    doc = torch.use_deterministic_algorithms.__doc__
    start, end = (doc.index(marker) for marker in optable.DOC_LISTS)
    assert hashlib.sha256(doc[start:end].encode()).hexdigest() == optable.DOC_LISTS_SHA256, (
        "torch's use_deterministic_algorithms lists changed: re-transcribe optable.py"
    )


@pytest.mark.parametrize(
    "op, status",
    [
        ("aten.convolution_backward.default", optable.DETERMINISTIC_UNDER_FLAG),
        ("aten.scatter_add_.default", optable.DETERMINISTIC_UNDER_FLAG),
        ("aten.index_put_.default", optable.DETERMINISTIC_UNDER_FLAG),
        ("aten.addmm.default", optable.CUBLAS),
        ("aten.mkldnn_linear.default", optable.CUBLAS),
        ("aten.mkldnn_convolution.default", optable.DETERMINISTIC_UNDER_FLAG),
        ("aten.avg_pool3d_backward.default", optable.RAISES_UNDER_FLAG),
        ("aten.relu.default", optable.NOT_LISTED),
    ],
)
def test_ops_are_classified_by_their_base_name(op, status):
    assert optable.classify(op)[0] == status


@pytest.fixture
def config(tiny_params):
    # torch's kernels, whose ops the audit names (the universal mode's run in its own)
    return resolve_run(tiny_params("compute.numerics=standard"), "deterministic", 0)


def test_audit_lists_the_ops_of_an_update_and_what_they_need(config, tmp_path):
    result = audit.audit(config, 4, tmp_path / "audit.json", tmp_path / "scratch")
    assert json.loads((tmp_path / "audit.json").read_text())["ops"] == result["ops"]
    ops = {e["op"]: e for e in result["ops"]}
    backward = ops["aten.convolution_backward.default"]
    assert backward["phases"] == ["backward"] and backward["count"] == 2 * audit.UPDATES
    assert backward["cuda"] == optable.DETERMINISTIC_UNDER_FLAG
    assert "online.layers.0" in backward["modules"]
    # gather's backward is scatter_add: atomics on CUDA (alertNotDeterministic)
    assert {"aten.gather.default", "aten.scatter_add.default"} <= set(
        result["cuda_summary"][optable.DETERMINISTIC_UNDER_FLAG]
    )
    # the linear layers: cuBLAS on CUDA, oneDNN's inner product on a CPU (named as on CUDA)
    linear = {"aten.mm.default", "aten.mkldnn_linear_backward.default"}
    assert linear & set(result["cuda_summary"][optable.CUBLAS])
    assert {"act", "evaluate", "optimizer", "sync"} <= {
        p for e in ops.values() for p in e["phases"]
    }
    assert result["global_rng_used"] == []
    assert result["settings"]["instruction_set"]["torch cpu capability"]


def test_audit_catches_a_draw_from_a_global_rng(config, tmp_path, monkeypatch):
    from reprodqn.dqn.agent import DQNAgent

    act = DQNAgent.act

    def sloppy_act(self, state, rng):
        np.random.random()  # noqa: NPY002 - the defect the audit must catch
        return act(self, state, rng)

    monkeypatch.setattr(DQNAgent, "act", sloppy_act)
    result = audit.audit(config, 4, tmp_path / "audit.json", tmp_path / "scratch")
    assert result["global_rng_used"] == ["numpy.random"]
    assert "global RNGs drawn from: numpy.random" in audit.summary(result)


def test_audit_runs_every_variant_of_the_family(tiny_params, tmp_path):
    config = resolve_run(
        tiny_params(
            "replay.prioritized=true", "agent.dueling=true", "agent.double=true", "agent.n_step=3"
        ),
        "deterministic",
        0,
    )
    result = audit.audit(config, 4, tmp_path / "audit.json", tmp_path / "scratch")
    modules = {m for e in result["ops"] for m in e["modules"]}
    assert any(m.startswith("online.advantage") for m in modules)  # the dueling head ran
    assert result["global_rng_used"] == []
