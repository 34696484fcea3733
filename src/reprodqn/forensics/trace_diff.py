"""Compare two traces of the same window (`reprodqn trace-diff A B`): the first update,
phase and op whose output differs, and the module it belongs to, on one screen."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from reprodqn.core.errors import InputError
from reprodqn.determinism.provenance import differing_values
from reprodqn.forensics.trace import FORMAT

# what each output of a multi-output op is, for naming the one that differs
OUTPUT_NAMES = {
    "aten.convolution_backward.default": ("input grad", "weight grad", "bias grad"),
    "aten.max.dim": ("values", "indices"),
}
SAME_WINDOW = ("group", "run", "from_step", "experiment_digest")
UPDATE_FIELDS = {"update", "step", "actions", "minibatch", "ops"}


def load(path: Path) -> tuple[dict, list[dict]]:
    """A trace's header and update records (plain or gzipped, by the .gz suffix); one-line
    errors for anything else."""
    path = Path(path)
    try:
        data = path.read_bytes()
        lines = (gzip.decompress(data) if path.suffix == ".gz" else data).decode().splitlines()
        header = json.loads(lines[0]) if lines else {}
        updates = [json.loads(line) for line in lines[1:]]
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable trace ({exc.__class__.__name__})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InputError(
            f"{path}: not a reprodqn trace (expected a first line with format {FORMAT})"
        )
    missing = [key for key in (*SAME_WINDOW, "compute", "numerics") if key not in header]
    bad_lines = [
        n
        for n, u in enumerate(updates, 2)
        if not isinstance(u, dict) or not UPDATE_FIELDS <= set(u)
    ]
    if missing or bad_lines:
        raise InputError(
            f"{path}: damaged trace (header lacks {', '.join(missing) or '-'}; "
            f"malformed update lines: {bad_lines[:3] or '-'})"
        )
    return header, updates


def _output_name(op: str, index: int, count: int) -> str:
    names = OUTPUT_NAMES.get(op)
    if names and index < len(names):
        return names[index]
    return "output" if count == 1 else f"output {index}"


def start_difference(header_a: dict, header_b: dict) -> dict | None:
    """Tensors (weights, target, optimizer state) that differ when the window opens."""
    start_a, start_b = header_a.get("start_state", {}), header_b.get("start_state", {})
    names = sorted(n for n in set(start_a) | set(start_b) if start_a.get(n) != start_b.get(n))
    if not names:
        return None
    return {"update": None, "step": header_a["from_step"], "what": "start state", "tensors": names}


def first_difference(a: list[dict], b: list[dict]) -> dict | None:
    """Where two traces of one window first part, or None if they never do."""
    for ua, ub in zip(a, b, strict=False):
        where = {"update": ua["update"], "step": ua["step"]}
        for field in ("step", "actions", "minibatch"):
            if ua[field] != ub[field]:
                return {**where, "what": field, "a": ua[field], "b": ub[field]}
        for oa, ob in zip(ua["ops"], ub["ops"], strict=False):
            if oa[1] != ob[1]:
                return {
                    **where,
                    "what": "op sequence",
                    "op_index": oa[0],
                    "a": oa[1],
                    "b": ob[1],
                    "phase": oa[2],
                    "module": oa[3],
                }
            if oa[4] != ob[4]:
                index = next(i for i, (x, y) in enumerate(zip(oa[4], ob[4], strict=True)) if x != y)
                return {
                    **where,
                    "what": "op output",
                    "op_index": oa[0],
                    "op": oa[1],
                    "phase": oa[2],
                    "module": oa[3],
                    "output": _output_name(oa[1], index, len(oa[4])),
                    "a": oa[4][index],
                    "b": ob[4][index],
                    "later_ops_differing": _later(ua["ops"], ub["ops"], oa[0]),
                }
        if len(ua["ops"]) != len(ub["ops"]):
            return {**where, "what": "op count", "a": len(ua["ops"]), "b": len(ub["ops"])}
    if len(a) != len(b):
        return {"update": None, "step": None, "what": "length", "a": len(a), "b": len(b)}
    return None


def _later(ops_a: list, ops_b: list, index: int, limit: int = 4) -> list[str]:
    out: list[str] = []
    for oa, ob in zip(ops_a[index + 1 :], ops_b[index + 1 :], strict=False):
        if oa[4] != ob[4] and len(out) < limit:
            out.append(f"op {oa[0]} {oa[1]} ({oa[2]}, {oa[3] or 'outside any module'})")
    return out


def compare(path_a: Path, path_b: Path) -> dict:
    header_a, a = load(path_a)
    header_b, b = load(path_b)
    for key in SAME_WINDOW:
        if header_a.get(key) != header_b.get(key):
            raise InputError(
                f"{path_b}: traces a different window or params than {path_a} "
                f"({key}: {header_b.get(key)} vs {header_a.get(key)})"
            )
    differing = sorted(
        k
        for k in set(header_a["compute"]) | set(header_b["compute"])
        if header_a["compute"].get(k) != header_b["compute"].get(k)
    )
    numerics = differing_values(header_a["numerics"], header_b["numerics"], ("A", "B"))
    return {
        "headers": (header_a, header_b),
        "updates": (len(a), len(b)),
        "first": start_difference(header_a, header_b) or first_difference(a, b),
        "compute_differing": {
            k: (header_a["compute"].get(k), header_b["compute"].get(k)) for k in differing
        },
        "numerics_differing": numerics,
    }


# ops that run outside any module, named by what they are, by phase: torch.from_numpy
# under the recorder is lift_fresh, the state acted on or (in an update) the minibatch's
# arrays, where a difference is in the rows or their order (compute.cpu_reduction_order)
OUTSIDE_MODULES = {
    ("aten.lift_fresh.default", "act"): "the state acted on entering torch",
    ("aten.lift_fresh.default", "update"): (
        "a minibatch array entering torch (its rows or their order)"
    ),
}


def _where(first: dict) -> str:
    if first["what"] == "op output":
        phase = {"act": "acting forward", "sync": "target copy"}.get(first["phase"], first["phase"])
        where = (
            f"of {first['module']}"
            if first["module"]
            else "outside any module, "
            + OUTSIDE_MODULES.get(
                (first["op"], "act" if first["phase"] == "act" else "update"), "not a layer"
            )
        )
        return f"{phase} {where} ({first['op']}, op {first['op_index']}), {first['output']}"
    if first["what"] == "op sequence":
        return (
            f"op {first['op_index']}: A ran {first['a']}, B ran {first['b']} "
            "(a different code path)"
        )
    return f"{first['what']}: A {first['a']}, B {first['b']}"


def first_line(first: dict | None) -> str:
    """One line: where two traces first part (first_difference's or start_difference's)."""
    if first is None:
        return "identical: every action, minibatch and op output"
    if first["what"] == "start state":
        shown = ", ".join(first["tensors"][:4]) + (" ..." if len(first["tensors"]) > 4 else "")
        return (
            f"the window starts from different states at step {first['step']:,}: "
            f"{len(first['tensors'])} tensors differ ({shown}); the runs parted "
            "earlier, or the resume points differ: trace an earlier window"
        )
    if first["update"] is None:
        return f"identical where both ran; A has {first['a']} updates, B {first['b']}"
    return (
        f"first difference: update {first['update']:,} (agent step "
        f"{first['step']:,}), {_where(first)}"
    )


def summary(result: dict) -> str:
    header = result["headers"][0]
    lines = [
        f"trace-diff: window {header['group']}/{header['run']} from step "
        f"{header['from_step']}, {result['updates'][0]} and {result['updates'][1]} "
        "updates"
    ]
    first = result["first"]
    lines.append(first_line(first))
    if first is not None and first["what"] == "op output":
        lines.append(
            f"  A {first['a']}  B {first['b']}; every earlier op, action and "
            "minibatch index identical"
        )
        lines += [f"  then: {text}" for text in first["later_ops_differing"]]
    for key, (a, b) in result["compute_differing"].items():
        lines.append(f"compute.{key}: A {a}, B {b}")
    if result["numerics_differing"]:
        lines.append("numeric conditions that differ: " + "; ".join(result["numerics_differing"]))
    return "\n".join(lines)
