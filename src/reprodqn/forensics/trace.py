"""Record a window of training op by op, to find where two machines part.

From a resume point, `reprodqn trace` re-runs N updates and writes, per update: the
minibatch indices, the actions taken since the previous update, and for every aten op
executed (acting forwards, the update's forward, backward and optimizer step, the target
copy) a SHA-256 of each tensor it produced, keyed by op index, op name, phase and module
path. `trace_diff` compares two such files.

In the universal numerics the arithmetic runs in reprodqn's kernels, outside torch's
dispatch, where the op stream shows only views and copies; there the trace also records
what the kernels produce, as ops named `universal.*`: every module's output (acting and the
TD target included), every weight gradient as it is accumulated, and each parameter and
optimizer buffer after the step.

A dispatch mode of our own rather than torch.utils._debug_mode.DebugMode: that one is
private API and hashes a tensor as its L1 norm or an order-blind XOR sum, where a
replication check needs the bytes. Module paths come from the public ModuleTracker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

from reprodqn.core import workspace
from reprodqn.core.atomic import atomic_open
from reprodqn.core.errors import InputError
from reprodqn.determinism import numerics, provenance, resume

FORMAT = "reprodqn-trace/1"
NAMED_BY_TENSOR = ("optimizer", "sync")  # ops outside any module: named by what they touch
UNINITIALISED = "empty"  # aten.empty*, new_empty...: their bytes are whatever memory held


def tensor_hash(tensor: torch.Tensor) -> str:
    """SHA-256 (64 bits shown) of a tensor's dtype, shape and bytes."""
    data = tensor.detach()
    if data.is_mkldnn:  # oneDNN's opaque layout: hashed as the dense tensor it holds
        data = data.to_dense()
    data = (data.cpu() if data.device.type != "cpu" else data).contiguous()
    digest = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class NamedModuleTracker(ModuleTracker):
    """ModuleTracker whose root modules carry our names (online, target), not class names."""

    def __init__(self, roots: dict[str, torch.nn.Module]):
        super().__init__()
        for name, module in roots.items():
            self._known_modules[module] = name

    def innermost(self) -> str:
        parents = [p for p in self.parents if p != "Global"]
        return max(parents, key=lambda p: (p.count("."), p)) if parents else ""


class OpRecorder(TorchDispatchMode):
    """Every aten op's name, phase, module and output hashes, in execution order."""

    def __init__(self, tracker: NamedModuleTracker):
        super().__init__()
        self.tracker = tracker
        self.phase: str | None = None  # act, sync, optimizer: set around those calls
        self.tensor_names: dict[int, str] = {}  # data_ptr -> parameter or state name
        self.last_name = ""
        self.ops: list[list] = []
        self.hashing = False  # the hashing of `note` is not the run's: never recorded

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.hashing:
            return out
        name = str(func)
        if UNINITIALISED not in name and not name.startswith("profiler."):
            hashes = [
                tensor_hash(t) if isinstance(t, torch.Tensor) else None
                for t in tree_flatten(out)[0]
            ]
            self.ops.append([len(self.ops), name, self.current_phase(), self.module(args), hashes])
        return out

    def note(self, name: str, module: str, produced, phase: str | None = None) -> None:
        """A record of what a universal kernel produced, in the ops' order and format."""
        self.hashing = True
        try:
            hashes = [
                tensor_hash(t) if isinstance(t, torch.Tensor) else None
                for t in tree_flatten(produced)[0]
            ]
        finally:
            self.hashing = False
        self.ops.append([len(self.ops), name, phase or self.current_phase(), module, hashes])

    def current_phase(self) -> str:
        if self.phase:
            return self.phase
        return "backward" if torch._C._current_graph_task_id() != -1 else "forward"

    def module(self, args) -> str:
        if self.phase not in NAMED_BY_TENSOR:
            return self.tracker.innermost()
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is not None and first.data_ptr() in self.tensor_names:
            self.last_name = self.tensor_names[first.data_ptr()]
        return self.last_name  # temporaries belong to the parameter being stepped

    @contextlib.contextmanager
    def during(self, phase: str):
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous


def _name_tensors(recorder: OpRecorder, agent) -> None:
    """Parameters, grads and optimizer state of both networks, by name, for the ops of the
    optimizer step and the target copy (renamed each time: a freed grad's address comes
    back as a temporary's)."""
    recorder.tensor_names.clear()
    for prefix, net in (("online", agent.online), ("target", agent.target)):
        for name, param in net.named_parameters():
            recorder.tensor_names[param.data_ptr()] = f"{prefix}.{name}"
            if param.grad is not None:
                recorder.tensor_names[param.grad.data_ptr()] = f"{prefix}.{name}.grad"
            for key, value in agent.optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    recorder.tensor_names[value.data_ptr()] = f"{prefix}.{name}.{key}"


class Window:
    """Taps on one Run: actions, minibatch indices and phases, without changing a value."""

    def __init__(self, run, recorder: OpRecorder):
        self.actions: list[int] = []
        self.minibatches: list[list[int]] = []
        agent, replay = run.agent, run.replay
        act, sync, sample = agent.act, agent.sync_target, replay.sample

        def traced_act(state, rng):
            with recorder.during("act"):
                action = act(state, rng)
            self.actions.append(int(action))
            return action

        def traced_sync():
            _name_tensors(recorder, agent)
            recorder.last_name = ""
            with recorder.during("sync"):
                sync()

        def traced_sample(*args, **kwargs):
            batch = sample(*args, **kwargs)
            self.minibatches.append([int(i) for i in batch["indices"]])
            return batch

        def before_step(*_):
            _name_tensors(recorder, agent)
            recorder.phase, recorder.last_name = "optimizer", ""

        def after_step(*_):
            recorder.phase = None

        act_lockstep = agent.act_lockstep

        def traced_act_lockstep(states, rngs):
            with recorder.during("act"):
                actions = act_lockstep(states, rngs)
            self.actions.extend(actions)
            return actions

        agent.act, agent.sync_target, replay.sample = traced_act, traced_sync, traced_sample
        agent.act_lockstep = traced_act_lockstep
        agent.optimizer.register_step_pre_hook(before_step)
        agent.optimizer.register_step_post_hook(after_step)
        # the step as torch's own kernels, one recorded op each (the same bits as one pass)
        agent.optimizer.one_pass = False


def tap_universal_kernels(agent, recorder: OpRecorder) -> None:
    """Records of the universal kernels' results, which torch's dispatch does not see: each
    module's output, each weight gradient once accumulated, and after the optimizer step
    each stepped parameter with its buffers."""
    nets = {"online": agent.online, "target": agent.target}
    for prefix, net in nets.items():
        for name, module in net.named_modules():
            path = f"{prefix}.{name}" if name else prefix
            kind = f"universal.{type(module).__name__}.forward"
            module.register_forward_hook(
                lambda _, __, out, kind=kind, path=path: recorder.note(kind, path, out)
            )
        for name, param in net.named_parameters():
            if not param.requires_grad:  # the target network's: never stepped
                continue
            param.register_post_accumulate_grad_hook(
                lambda p, path=f"{prefix}.{name}": recorder.note("universal.grad", path, p.grad)
            )
    stepped = [(f"online.{name}", p) for name, p in agent.online.named_parameters()]

    def after_step(*_):
        for path, param in stepped:
            state = agent.optimizer.state.get(param, {})
            buffers = [state[key] for key in sorted(state) if isinstance(state[key], torch.Tensor)]
            recorder.note("universal.step", path, [param, *buffers], phase="optimizer")

    agent.optimizer.register_step_post_hook(after_step)


def record(run, updates: int, out: Path, header: dict, progress=None) -> dict:
    """Advance `run` through `updates` updates, writing one trace line per update."""
    tracker = NamedModuleTracker({"online": run.agent.online, "target": run.agent.target})
    recorder = OpRecorder(tracker)
    window = Window(run, recorder)
    if run.config.compute.numerics == "universal":
        tap_universal_kernels(run.agent, recorder)
    done, ops, start = 0, 0, time.perf_counter()
    with atomic_open(out, "w") as handle, tracker, recorder:
        handle.write(json.dumps({**header, "format": FORMAT}, sort_keys=True) + "\n")
        while done < updates and run.step < run.config.train.steps:
            before = run.updates
            run.advance()
            if run.updates == before:
                continue
            done += 1
            line = {
                "update": run.updates,
                "step": run.step - 1,
                "actions": window.actions,
                "minibatch": window.minibatches[-1],
                "ops": recorder.ops,
            }
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
            ops += len(recorder.ops)
            window.actions, window.minibatches, recorder.ops = [], [], []
            if progress is not None:
                progress(done)
    seconds = time.perf_counter() - start
    return {"updates": done, "ops": ops, "seconds_per_update": seconds / max(done, 1)}


def open_window(
    config,
    run_dir: Path,
    from_step: int,
    resume_dir: Path | None,
    scratch: Path,
    device: torch.device,
):
    """A Run at `from_step`: from `resume_dir`, else the run's own resume point if it is at
    that step, else retrained here to it (deterministic: the same state the run had)."""
    from reprodqn.forensics import rerun
    from reprodqn.training.loop import make_run

    if resume_dir is None and from_step > 0:
        resume_dir = workspace.resume_dir(run_dir)
        if workspace.latest_resume_step(resume_dir) != from_step:
            print(
                f"trace: no resume point at step {from_step} in {resume_dir}; retraining "
                f"{config.group}/{config.run} to it here first",
                file=sys.stderr,
            )
            resume_dir = workspace.resume_dir(
                rerun.train_until(config, scratch / "to-window", from_step)
            )
    run = make_run(config, scratch, device)
    run.agent.graphs = None  # op by op: the eager kernels a graph would replay
    if resume_dir is None:
        return run
    point = resume.load(Path(resume_dir), device)
    if point is None:
        raise InputError(f"{resume_dir}: no resume point there (expected latest.json)")
    if point.state["run"]["step"] != from_step:
        raise InputError(
            f"{resume_dir}: its resume point is at step "
            f"{point.state['run']['step']}, not --from-resume {from_step}"
        )
    if point.state.get("experiment_digest") != config.experiment_digest():
        raise InputError(
            f"{resume_dir}: resume point was written with different params "
            f"than {config.group}/{config.run}'s (mismatched params)"
        )
    run.set_state(point.state)
    return run


def trace(
    config,
    run_dir: Path,
    from_step: int,
    updates: int,
    out: Path,
    resume_dir: Path | None = None,
    scratch: Path = Path("build/trace"),
    progress=None,
) -> dict:
    """`reprodqn trace`: a window of `updates` updates from `from_step`, recorded to `out`."""
    if updates < 1 or from_step < 0:
        raise InputError(
            f"trace: expected --updates >= 1 and --from-resume >= 0, got {updates} and {from_step}"
        )
    if from_step >= config.train.steps:  # found out only after retraining the whole run
        raise InputError(
            f"trace --from-resume {from_step}: the run has only {config.train.steps} steps"
        )
    if config.train.actors > config.agent.update_every:  # a line per update needs at most one
        raise InputError(
            f"trace: train.actors ({config.train.actors}) above "
            f"agent.update_every ({config.agent.update_every}) takes several "
            "updates per round; trace a run with at most one"
        )
    compute = config.compute
    device, _ = numerics.configure(compute.device, compute.threads, compute.deterministic_gpu)
    run = open_window(config, run_dir, from_step, resume_dir, Path(scratch), device)
    try:
        return _record_window(run, config, from_step, updates, out, progress)
    finally:
        run.close()


def _record_window(run, config, from_step: int, updates: int, out: Path, progress) -> dict:
    compute = config.compute
    conditions = provenance.collect(compute)
    start = {name: tensor_hash(t) for name, t in sorted(run.agent.tensors().items())}
    header = {
        "group": config.group,
        "run": config.run,
        "from_step": from_step,
        "start_state": start,
        "updates": updates,
        "experiment_digest": config.experiment_digest(),
        "compute": compute.model_dump(mode="json"),
        "numerics": provenance.fingerprint_fields(conditions),
        "torch": torch.__version__,
    }
    return record(run, updates, Path(out), header, progress)
