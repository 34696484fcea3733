"""Weight checkpoints: safetensors files (data, never code) that carry their own hash.

The weights hash is SHA-256 over the tensors in name order (name, dtype, shape, bytes), so
it identifies the weights whatever file they travel in; it is the hash in hashes.jsonl.
The file's own bytes are deterministic too: safetensors writes its metadata in the order of
a Rust HashMap, random per process, so the header is rewritten with sorted keys.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from copy import deepcopy
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from reprodqn.core.atomic import atomic_open
from reprodqn.core.digests import apart
from reprodqn.core.errors import InputError


def weights_sha256(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        header = json.dumps([name, str(tensor.dtype), list(tensor.shape)])
        digest.update(header.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())  # any dtype
    return digest.hexdigest()


def cpu_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().cpu().clone() for name, t in module.state_dict().items()}


def sorted_header(data: bytes) -> bytes:
    """The same safetensors file with its JSON header's keys sorted and padded with spaces to
    a multiple of 8 bytes, as the format requires (the tensor offsets are relative to the
    data that follows the header, so they stay valid)."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.dumps(json.loads(data[8 : 8 + length]), sort_keys=True, separators=(",", ":"))
    header += " " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header.encode() + data[8 + length :]


def save_weights(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, object]) -> str:
    """Write a checkpoint atomically; returns its weights hash (also stored inside it)."""
    digest = weights_sha256(tensors)
    meta = {**{k: str(v) for k, v in metadata.items()}, "weights_sha256": digest}
    data = sorted_header(save({k: v.contiguous() for k, v in tensors.items()}, metadata=meta))
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    return digest


def save_torchscript(path: Path, module: torch.nn.Module) -> str:
    """Write `module` as a TorchScript file atomically, the same bytes in every process, and
    return the file's SHA-256. Frozen, not only scripted: a scripted file lists each layer's
    constants in a Python set's order, which PYTHONHASHSEED changes from process to process
    (two identical runs wrote different bytes); a frozen graph has no such list. A copy on
    the CPU is frozen (the caller's module, its device and its layers' modes untouched):
    there, with optimize_numerics=False, freezing keeps every op, so the file computes the
    module's bits; on CUDA it would join linear layers that share an input into one
    product, whose sums are not the module's."""
    copy = deepcopy(module).cpu().eval()
    frozen = torch.jit.freeze(torch.jit.script(copy), optimize_numerics=False)
    buffer = io.BytesIO()
    torch.jit.save(frozen, buffer)
    data = buffer.getvalue()
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    return hashlib.sha256(data).hexdigest()


def read_metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return dict(handle.metadata() or {})
    except FileNotFoundError:
        raise InputError(f"{path}: checkpoint not found") from None
    except (SafetensorError, OSError, ValueError):
        raise InputError(f"{path}: not a readable safetensors checkpoint (corrupted?)") from None


def load_weights(path: Path, expected_sha256: str | None = None):
    """Tensors and metadata of a checkpoint, after checking the weights against the hash it
    carries and, if given, the hash recorded elsewhere (hashes.jsonl, selected.json)."""
    path = Path(path)
    metadata = read_metadata(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError):
        raise InputError(f"{path}: not a readable safetensors checkpoint (corrupted?)") from None
    actual = weights_sha256(tensors)
    recorded = metadata.get("weights_sha256")
    if recorded is None:
        raise InputError(f"{path}: checkpoint carries no weights_sha256 (not written by reprodqn)")
    if actual != recorded:
        shown = apart(actual, recorded)
        raise InputError(
            f"{path}: weights hash {shown[0]} does not match its recorded {shown[1]} (corrupted)"
        )
    if expected_sha256 is not None and actual != expected_sha256:
        shown = apart(actual, expected_sha256)
        raise InputError(f"{path}: weights hash {shown[0]} does not match the expected {shown[1]}")
    return tensors, metadata
