"""Exact, replicable training for any PyTorch script: reprodqn's exactness as a library.

A training script that uses these five pieces gets what reprodqn's own DQN has, and
`reprodqn verify A B` can compare any two of its result folders:

- `setup()`, called before torch is imported: the CPU instruction-set floor, the thread
  count, the deterministic-kernel switches and the environment they need;
- `Streams`: named, seeded random streams (numpy PCG64 or torch generators) with state;
- `HashChain`: SHA-256 of the weights at every checkpoint and a chain over every loss,
  in `hashes.jsonl`, with the weights as safetensors checkpoints;
- `save_resume_point()` / `load_resume_point()`: everything the script holds (modules,
  optimizers, streams, the chain, replay arrays, environments, counters), written
  atomically, loaded without pickle and checked against its SHA-256;
- `start_run()`: the run's config (a different one is refused), the conditions record
  with its SBOM, and the numerics settings applied.

`save_policy()` writes the policy `evaluate-policy` plays, the same bytes always; `GymEnv`
puts a Gymnasium env in a resume point; `main(fn)`: refusals as one line and exit 2.

`universal`: layers, losses and optimizers in one written order on every machine and
torch version; setup(numerics="universal") watches every op (universal-numerics.md).
Without them a chain holds on one stack, whose conditions `verify` compares.

May import: core, determinism, universal.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reprodqn.core import workspace
from reprodqn.core.atomic import append_line, truncate
from reprodqn.core.entry import main
from reprodqn.core.errors import InputError
from reprodqn.determinism import isa, log_lines
from reprodqn.determinism.data_loader import ResumableLoader
from reprodqn.determinism.global_generators import uninitialised
from reprodqn.determinism.gym_state import GymEnv
from reprodqn.universal import api as universal
from reprodqn.universal.record import chain_marks, check_weights

if TYPE_CHECKING:
    import torch

__all__ = [
    "InputError",
    "Setup",
    "setup",
    "cpu_floor",
    "Streams",
    "JsonLog",
    "HashChain",
    "chain_losses",
    "save_resume_point",
    "GymEnv",
    "ResumableLoader",
    "load_resume_point",
    "save_policy",
    "start_run",
    "uninitialised",
    "main",
    "universal",
]

EMPTY_CHAIN = "0" * 64

# ---------------------------------------------------------------------------------------------
# The process


@dataclass(frozen=True)
class Setup:
    """What `setup()` applied: the device, and the settings as conditions.json records them."""

    device: torch.device
    threads: int
    cpu_isa: str
    deterministic_gpu: bool
    applied: dict = field(default_factory=dict)
    cpu_reduction_order: str = "fixed"  # reprodqn's gpu-group emulation; scripts keep it fixed
    numerics: str = "standard"


def cpu_floor(floor: str = "portable") -> dict:
    """Pin the CPU kernels of oneDNN, ATen and MKL to an instruction-set floor, so any
    machine at or above it computes the same bits: "portable" (AVX2, Intel and AMD alike),
    "avx2", "avx512" or "native" (this machine's own: not portable). Must run before
    `import torch`: the libraries choose their kernels at the first op."""
    if floor not in isa.FLOORS:
        raise InputError(f"cpu_isa: {floor!r}; expected one of {', '.join(isa.FLOORS)}")
    applied = isa.apply(floor)
    _FLOOR_APPLIED[:] = [floor]
    return applied


_FLOOR_APPLIED: list[str] = []  # what cpu_floor() pinned in this process: setup()'s default
DEVICES = ("cpu", "cuda", "auto")


def setup(
    threads: int = 1,
    cpu_isa: str | None = None,
    device: str = "cpu",
    deterministic_gpu: bool = True,
    numerics: str = "standard",
) -> Setup:
    """Make this process compute exactly. Call it before `import torch`, whose kernels read
    the CPU floor's knobs at their first op (refused after, unless the environment holds
    them: call `cpu_floor()` first when the script imports torch at the top).

    Args:
        threads: torch's intra-op threads (results depend on it); OMP/MKL get the same.
        cpu_isa: "portable" (AVX2, Intel and AMD alike), "avx2", "avx512" or "native";
            default: the floor cpu_floor() pinned, else "portable".
        device: "cpu", "cuda" or "auto".
        deterministic_gpu: deterministic algorithms and cuDNN, cuBLAS's fixed workspace.
        numerics: "standard" (torch's kernels) or "universal" (the layers and optimizers of
            `universal` compute one chain on every machine, and from here on any op of
            torch's that computes floats is refused but in `universal.outside()`).
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads: {threads!r}; expected a whole number, at least 1")
    if device not in DEVICES:
        raise InputError(f"device: {device!r}; expected one of {', '.join(DEVICES)}")
    if numerics not in ("standard", "universal"):
        raise InputError(f"numerics: {numerics!r}; expected standard or universal")
    cpu_isa = cpu_isa or (_FLOOR_APPLIED[0] if _FLOOR_APPLIED else "portable")
    cpu_floor(cpu_isa)
    for name in isa.THREAD_ENV:  # inherited by any worker the script starts
        os.environ[name] = str(threads)
    from reprodqn.determinism import global_generators, kernel_settings
    from reprodqn.determinism import numerics as settings

    torch_device, applied = settings.configure(device, threads, deterministic_gpu)
    applied |= settings.configure_universal(numerics, threads, torch_device)
    global_generators.start("setup()")
    kernel_settings.watch_compile(numerics)  # torch.compile's calls, recorded
    if numerics == "universal":  # every op from here on: universal's, refused or declared
        importlib.import_module("reprodqn.universal.guard").watch_process()
    return Setup(torch_device, threads, cpu_isa, deterministic_gpu, applied, numerics=numerics)


# ---------------------------------------------------------------------------------------------
# Named streams


class Streams:
    """Named, seeded random streams: numpy PCG64 generators and torch generators, each
    seeded from its own seed so that changing one source of randomness leaves the others
    untouched. `streams["name"]` is the generator; draw from it, never from a global one.
    """

    def __init__(
        self,
        numpy: Mapping[str, int] | None = None,
        torch: Mapping[str, int] | None = None,
        torch_device: str = "cpu",
    ):
        import torch as _torch

        numpy, torch = dict(numpy or {}), dict(torch or {})
        both = set(numpy) & set(torch)
        if both:
            raise InputError(f"streams {sorted(both)}: named as both a numpy and a torch stream")
        self.seeds = {"numpy": numpy, "torch": torch}
        self._numpy = {name: np.random.Generator(np.random.PCG64(s)) for name, s in numpy.items()}
        self._torch = {
            name: _torch.Generator(device=torch_device).manual_seed(s) for name, s in torch.items()
        }

    def __getitem__(self, name: str) -> Any:
        if name in self._numpy:
            return self._numpy[name]
        if name in self._torch:
            return self._torch[name]
        raise KeyError(f"no stream named {name!r} (streams: {sorted(self.names)})")

    @property
    def names(self) -> list[str]:
        return [*self._numpy, *self._torch]

    def get_state(self) -> dict:
        return {
            "numpy": {n: dict(g.bit_generator.state) for n, g in self._numpy.items()},
            "torch": {n: g.get_state() for n, g in self._torch.items()},
        }

    def set_state(self, state: dict) -> None:
        saved = {kind: sorted(state.get(kind, {})) for kind in ("numpy", "torch")}
        ours = {"numpy": sorted(self._numpy), "torch": sorted(self._torch)}
        if saved != ours:
            raise InputError(f"stream names {saved} in the saved state; this run has {ours}")
        for name, bit_state in state["numpy"].items():
            self._numpy[name].bit_generator.state = bit_state
        for name, torch_state in state["torch"].items():
            self._torch[name].set_state(torch_state.clone())


# ---------------------------------------------------------------------------------------------
# The hash chain


def chain_losses(chain: str, losses: np.ndarray) -> str:
    """Extend a loss hash chain: h_k = SHA-256(h_{k-1} || float32 loss_k)."""
    import hashlib
    import struct

    state = bytes.fromhex(chain)
    for value in np.asarray(losses).astype(np.float32, copy=False).ravel():
        state = hashlib.sha256(state + struct.pack("<f", value)).digest()
    return state.hex()


def _float32(value):
    """A tensor of any dtype (bfloat16 included), gradient or not, as float32 numbers."""
    if hasattr(value, "detach"):
        import torch  # loaded already: this is one of its tensors

        return value.detach().to("cpu", torch.float32).numpy()
    return value


class JsonLog:
    """An append-only JSON-lines log (one record a line, flushed to disk) whose resume
    state is its length: restored, the lines written after the resume point are cut off,
    so a resumed run's log equals an uninterrupted one's."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def write(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, json.dumps(record, sort_keys=True))

    def get_state(self) -> dict:
        return {"bytes": self.path.stat().st_size if self.path.exists() else 0}

    def set_state(self, state: dict) -> None:
        truncate(self.path, int(state["bytes"]))

    def start_over(self) -> None:
        self.set_state({"bytes": 0})


class HashChain:
    """A run's record of what it computed, in `directory`: each loss folded into a chain, and
    at each checkpoint a line of hashes.jsonl (step, weights and loss-chain SHA-256, updates)
    beside checkpoints/step-N.safetensors. Runs are identical when their hashes.jsonl are."""

    def __init__(self, directory: str | Path, numerics: str = "standard", results=()):
        """`results`: JsonLogs whose lines are results (episode returns, say): each line of
        hashes.jsonl then holds their SHA-256, so `verify` compares them too."""
        self.directory = Path(directory)
        self.marks = chain_marks(numerics)  # a universal chain names its mode per line
        self.results = list(results)
        self.log = JsonLog(self.directory / workspace.HASHES)
        self.loss_chain = EMPTY_CHAIN
        self.updates = 0

    def extend(self, losses) -> None:
        """Fold losses in, in order (a float, a sequence, an array or a tensor of any float
        dtype), each as the float32 nearest it."""
        if losses is None:
            raise InputError("HashChain.extend: got None (expected the losses to chain)")
        items = losses if isinstance(losses, list | tuple) else [losses]
        losses = np.concatenate(
            [np.atleast_1d(np.asarray(_float32(item), dtype=np.float32)) for item in items]
            or [np.zeros(0, np.float32)]
        )
        self.loss_chain = chain_losses(self.loss_chain, losses)
        self.updates += losses.size

    def checkpoint(self, step: int, weights, metadata: Mapping[str, object] | None = None) -> dict:
        """Write the weights (a module or a dict of tensors) and the chain's line; returns
        the line. The weights hash covers names, dtypes, shapes and bytes."""
        from reprodqn.determinism import run_folder
        from reprodqn.determinism.checkpoints import cpu_weights, save_weights

        run_folder.before_writing(self.directory, f"{self.directory}: checkpoint at step {step}")
        written = workspace.read_hashes(self.directory)
        if written and step <= written[-1]["step"]:
            raise InputError(
                f"HashChain.checkpoint: step {step} is not after the last one, "
                f"{written[-1]['step']} ({self.log.path}): a counter the resume point lacks?"
            )
        check_weights(weights, f"{self.directory}: checkpoint at step {step}")
        tensors = cpu_weights(weights) if hasattr(weights, "state_dict") else weights
        path = workspace.checkpoint_path(self.directory, step)
        digest = save_weights(path, tensors, {"step": str(step), **(metadata or {})})
        line = {"step": step, "weights_sha256": digest, "loss_chain_sha256": self.loss_chain}
        line |= self.marks
        if self.results:
            line["results_sha256"] = log_lines.files_digest([log.path for log in self.results])
        line["updates"] = self.updates  # the keys are written sorted
        self.log.write(line)
        return line

    def get_state(self) -> dict:
        state = {"loss_chain": self.loss_chain, "updates": self.updates, **self.log.get_state()}
        return state | {log_lines.RECORD: log_lines.digests(self.log.path, state["bytes"])}

    def check_state(self, state: dict) -> None:
        """Refuse a chain whose lines before the point changed since it was saved."""
        log_lines.check(self.log.path, state)

    def set_state(self, state: dict) -> None:
        """Back to the saved point: later lines, and the checkpoints they name, cut off."""
        self.loss_chain = str(state["loss_chain"])
        self.updates = int(state["updates"])
        self.log.set_state(state)
        written = workspace.read_hashes(self.directory)
        last = written[-1]["step"] if written else -1
        for path in workspace.checkpoints_dir(self.directory).glob("step-*.safetensors"):
            number = path.stem.removeprefix("step-")
            if number.isdigit() and int(number) > last:
                path.unlink()

    def start_over(self) -> None:
        """As at the run's start: no loss folded in, no line written."""
        self.set_state({"loss_chain": EMPTY_CHAIN, "updates": 0, "bytes": 0})


def save_policy(module: torch.nn.Module, path: str | Path) -> str:
    """Write the policy `reprodqn evaluate-policy` plays (uint8 frame stacks -> (N, A)
    values, or (N,) actions) as TorchScript, atomically, with the same bytes in every
    process (torch.jit.save's own bytes change with PYTHONHASHSEED); returns its SHA-256."""
    from reprodqn.determinism.checkpoints import save_torchscript

    return save_torchscript(Path(path), module)


# ---------------------------------------------------------------------------------------------
# Resume points


def save_resume_point(run: str | Path, step: int, parts: Mapping[str, Any]) -> None:
    """Save every part's state as the run's latest resume point (in run/resume),
    atomically: a kill at any moment leaves the previous point intact. A part is a module,
    an optimizer, anything with get_state()/set_state() or state_dict()/load_state_dict(),
    a list of such (a vector of environments), or plain values (numbers, strings, bytes,
    numpy scalars and arrays, tensors, lists, tuples and dicts of them), each given back
    with its type, dtype and device; anything else is refused, naming it."""
    from reprodqn.determinism import resume_parts, run_folder

    kernels = run_folder.before_writing(Path(run), f"{run}: resume point at step {step}")
    resume_parts.save(Path(run), step, dict(parts), kernels)


def load_resume_point(
    run: str | Path, parts: Mapping[str, Any], device: str | None = None
) -> dict | None:
    """Restore the parts from the run's latest resume point, every file checked against its
    SHA-256 first, arrays, tensors, lists and dicts in place; returns the saved states by
    name (read plain values from here). The objects saved and the objects asked for must be
    the same (a difference is refused, naming the parts); tensors return to the device
    each was saved on, or to `device`. With no point yet it returns None and empties the
    logs and chains among the parts: a run killed before its first point starts over as it
    began, not after what it had written. A refusal leaves every file as it was."""
    from reprodqn.determinism import global_generators, resume_parts, run_folder

    state = resume_parts.load(Path(run), dict(parts), device)
    if state is None:
        for part in parts.values():
            for log in part if isinstance(part, list | tuple) else [part]:
                if isinstance(log, JsonLog | HashChain):
                    log.start_over()
    run_folder.record_pending(Path(run))
    global_generators.restart("load_resume_point()")  # what built the script drew before
    return state


# ---------------------------------------------------------------------------------------------
# The run's records


def start_run(directory: str | Path, config: Mapping[str, Any], process: Setup) -> dict:
    """Make the run directory and hold it (a second process on it is refused, naming the
    holder), or check that an existing one holds a run of this very config and script
    (another is refused: results never mix) and, where it holds a resume point, that this
    process computes as the run began (another device, CPU floor, thread count or numerics
    mode is refused; another torch, GPU or driver unless REPRODQN_FORCE_RESUME=1, then
    recorded as a segment). Records the command that runs it (what `reprodqn verify RUN
    --until STEP` runs again), the conditions, the SBOM and the numerics settings: a
    resume's only once its point is loaded, so a refused resume writes nothing. Returns
    the conditions record."""
    from reprodqn.determinism import run_folder

    return run_folder.start(Path(directory), config, process)
