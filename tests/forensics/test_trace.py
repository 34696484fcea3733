"""Op-level traces of a training window, and the diff that names where two part."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from reprodqn.config.params import resolve_run
from reprodqn.core.errors import InputError
from reprodqn.forensics import trace, trace_diff
from reprodqn.training.loop import Run, train
from tests.helpers import TINY, cli_env

# torch's ops, which a trace records one by one: the standard numerics'
STANDARD = ["compute.numerics=standard"]

NUMERICS_OPS = ("convolution", "addmm", "mm", "bmm", "linear")


@pytest.fixture
def config(tiny_params):
    return resolve_run(tiny_params(*STANDARD), "deterministic", 0)


def _trace(config, path, updates=12, **kwargs):
    return trace.trace(
        config,
        path.parent / "runs-none",
        kwargs.pop("from_step", 0),
        updates,
        path,
        scratch=path.parent / f"scratch-{path.stem}",
        **kwargs,
    )


def _updates(path):
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_two_traces_under_the_same_settings_are_identical(config, tmp_path):
    info = _trace(config, tmp_path / "a.jsonl")
    _trace(config, tmp_path / "b.jsonl")
    assert info["updates"] == 12 and info["ops"] > 12 * 100
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    first = _updates(tmp_path / "a.jsonl")[0]
    assert first["step"] == 204 and len(first["minibatch"]) == 8
    phases = {op[2] for op in first["ops"]}
    assert {"forward", "backward", "optimizer"} <= phases
    conv_grads = [op for op in first["ops"] if op[1] == "aten.convolution_backward.default"]
    assert [op[3] for op in conv_grads] == ["online.layers.2", "online.layers.0"]
    result = trace_diff.compare(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert result["first"] is None


def test_tracing_observes_and_never_changes_the_run(config, tmp_path):
    from reprodqn.determinism import numerics

    device, _ = numerics.configure("cpu", 1, True)
    traced, plain = Run(config, tmp_path, device), Run(config, tmp_path, device)
    trace.record(traced, 10, tmp_path / "t.jsonl", {})
    while plain.step < traced.step:
        plain.advance()
    assert traced.updates == plain.updates == 10
    a, b = traced.agent.tensors(), plain.agent.tensors()
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_a_universal_trace_records_what_the_kernels_produce(tiny_params, tmp_path):
    """The universal kernels run outside torch's dispatch: the trace records their results
    (each module's output, each weight gradient, each stepped parameter and buffer), the
    same at 1 and 2 threads."""
    universal = resolve_run(tiny_params(), "deterministic", 0)  # the default numerics
    assert universal.compute.numerics == "universal"
    _trace(universal, tmp_path / "a.jsonl", updates=3)
    two_threads = resolve_run(tiny_params("compute.threads=2"), "deterministic", 0)
    _trace(two_threads, tmp_path / "b.jsonl", updates=3)
    assert trace_diff.compare(tmp_path / "a.jsonl", tmp_path / "b.jsonl")["first"] is None
    ops = _updates(tmp_path / "a.jsonl")[0]["ops"]
    grads = [op[3] for op in ops if op[1] == "universal.grad"]
    steps = [op[3] for op in ops if op[1] == "universal.step"]
    assert len(grads) == 8 and sorted(grads) == sorted(steps)  # 4 layers' weights and biases
    assert grads[0].startswith("online.layers.") and grads[-1] == "online.layers.0.bias"
    forwards = {(op[1], op[3]) for op in ops if op[2] == "forward"}
    assert {("universal.Conv2d.forward", "online.layers.0"), ("universal.QNetwork.forward",
            "target")} <= forwards  # fmt: skip


def test_a_universal_kernel_that_parts_is_named_at_its_own_op(tiny_params, tmp_path, monkeypatch):
    """A step nudged by one ulp in the first weight is named at that step, before any later
    forward reads the weight."""
    from reprodqn.determinism import numerics
    from reprodqn.universal import optim

    config = resolve_run(tiny_params(), "deterministic", 0)
    device, _ = numerics.configure("cpu", 1, True)
    plain = Run(config, tmp_path / "plain", device)
    trace.record(plain, 2, tmp_path / "plain.jsonl", {})
    update = optim.RMSprop._update

    def nudged(self, group, param, state):
        update(self, group, param, state)
        if param is self.param_groups[0]["params"][0]:
            flat = param.detach().view(-1)
            flat[0] = torch.nextafter(flat[0], flat[0] + 1)

    monkeypatch.setattr(optim.RMSprop, "_update", nudged)
    trace.record(Run(config, tmp_path / "nudged", device), 2, tmp_path / "nudged.jsonl", {})
    a, b = (_updates(tmp_path / f"{name}.jsonl")[0]["ops"] for name in ("plain", "nudged"))
    first = next(x for x, y in zip(a, b, strict=True) if x != y)
    assert first[1:4] == ["universal.step", "optimizer", "online.layers.0.weight"]


def test_a_window_from_a_resume_point_continues_the_trace_from_scratch(config, tmp_path):
    _trace(config, tmp_path / "whole.jsonl", updates=40)
    _trace(config, tmp_path / "late.jsonl", updates=10, from_step=300)  # retrains to 300
    whole = {u["update"]: u for u in _updates(tmp_path / "whole.jsonl")}
    late = _updates(tmp_path / "late.jsonl")
    assert late[0]["step"] == 300 and len(late) == 10
    assert all(whole[u["update"]] == u for u in late[1:])


def _cli(*args, cwd, **env):
    return subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _cli_trace(tmp_path, out, *extra, **env):
    sets = [arg for item in (*TINY, *STANDARD) for arg in ("--set", item)]
    result = _cli(
        "trace",
        "--params",
        str(tmp_path / "params.yaml"),
        "--group",
        "deterministic",
        "--run",
        "0",
        "--from-resume",
        "0",
        "--updates",
        "8",
        *sets,
        *extra,
        "--out",
        out,
        cwd=tmp_path,
        **env,
    )
    assert result.returncode == 0, result.stderr
    return tmp_path / out


@pytest.fixture
def workdir(tmp_path):
    from tests.helpers import PARAMS

    (tmp_path / "params.yaml").write_text(PARAMS.read_text())
    return tmp_path


def test_a_lowered_instruction_set_is_named_at_its_first_numerics_op(workdir):
    pinned = _cli_trace(workdir, "pinned.jsonl")
    lowered = _cli_trace(
        workdir, "lowered.jsonl", "--set", "compute.cpu_isa=native", ONEDNN_MAX_CPU_ISA="SSE41"
    )
    out = _cli("trace-diff", str(pinned), str(lowered), cwd=workdir)
    assert out.returncode == 1, out.stderr
    first = trace_diff.compare(pinned, lowered)["first"]
    assert first["what"] == "op output"
    assert any(name in first["op"] for name in NUMERICS_OPS), first
    assert first["module"].startswith(("online.layers", "target.layers"))
    assert out.stdout.splitlines()[1].startswith(f"first difference: update {first['update']}")
    assert "compute.cpu_isa: A portable, B native" in out.stdout
    assert 'environment.ONEDNN_MAX_CPU_ISA (A "AVX2", B "SSE41")' in out.stdout


def test_the_diff_names_actions_and_start_states(config, tmp_path):
    _trace(config, tmp_path / "a.jsonl", updates=3)
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    header, second = json.loads(lines[0]), json.loads(lines[2])
    second["actions"][-1] = (second["actions"][-1] + 1) % 4
    (tmp_path / "b.jsonl").write_text("\n".join([lines[0], lines[1], json.dumps(second)]))
    first = trace_diff.compare(tmp_path / "a.jsonl", tmp_path / "b.jsonl")["first"]
    assert (first["what"], first["update"]) == ("actions", second["update"])
    header["start_state"]["online.layers.0.weight"] = "0" * 16
    (tmp_path / "c.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]))
    result = trace_diff.compare(tmp_path / "a.jsonl", tmp_path / "c.jsonl")
    assert result["first"]["tensors"] == ["online.layers.0.weight"]
    assert "starts from different states" in trace_diff.summary(result)


@pytest.mark.parametrize("case", ["garbage", "other-window", "missing", "damaged"])
def test_trace_diff_bad_input_is_one_line(config, tmp_path, case):
    _trace(config, tmp_path / "a.jsonl", updates=2)
    other = tmp_path / "b.jsonl"
    if case == "garbage":
        other.write_bytes(b"\x00\xffnot json")
    elif case == "damaged":
        lines = (tmp_path / "a.jsonl").read_text().splitlines()
        other.write_text("\n".join([lines[0], '{"update": 1}']))
    elif case == "other-window":
        lines = (tmp_path / "a.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        header["from_step"] = 100
        other.write_text("\n".join([json.dumps(header), *lines[1:]]))
    out = _cli("trace-diff", str(tmp_path / "a.jsonl"), str(other), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert str(other) in out.stderr


def test_trace_refuses_a_missing_or_mismatched_resume_point(config, tiny_params, tmp_path):
    with pytest.raises(InputError, match=f"the run has only {config.train.steps} steps"):
        _trace(config, tmp_path / "a.jsonl", from_step=config.train.steps)
    with pytest.raises(InputError, match="no resume point there"):
        _trace(config, tmp_path / "a.jsonl", from_step=300, resume_dir=tmp_path / "nothing")
    other = resolve_run(tiny_params("agent.discount=0.9"), "deterministic", 0)
    for _ in train(other, tmp_path / "other", until=300):
        pass
    with pytest.raises(InputError, match="mismatched params"):
        _trace(
            config, tmp_path / "a.jsonl", from_step=300, resume_dir=tmp_path / "other" / "resume"
        )
    with pytest.raises(InputError, match="not --from-resume 200"):
        _trace(
            config, tmp_path / "a.jsonl", from_step=200, resume_dir=tmp_path / "other" / "resume"
        )
