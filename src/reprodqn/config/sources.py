"""Reading params files and `--set` overrides into raw mappings: YAML, overlays, dotted
keys (with the nearest valid key when one is mistyped), and validation errors as one line
naming the field and where it was set. config.py validates what these produce."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from reprodqn.core.errors import InputError

# What a run computed before a knob existed, where the knob's default is now another: a
# params file or a recorded run config that lacks the knob means this value, and a run's
# digest leaves the knob out at it (so those runs keep their digests).
BEFORE_IT_EXISTED = {"compute.numerics": "standard"}
# libyaml's parser where PyYAML has it (6x faster on params.yaml), with PyYAML's own resolver
# and constructor: the same values as yaml.safe_load
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_raw(path: str | Path) -> dict:
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=LOADER)
    except FileNotFoundError:
        raise InputError(f"{path}: no such params file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}:{where} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping of sections at the top level")
    return raw


def merge(base: dict, overlay: dict, path: list[str], source: str) -> None:
    for key, value in overlay.items():
        where = ".".join([*path, str(key)])
        if key not in base:
            raise InputError(f"{source}: unknown key {where!r}{nearest(where, base, path)}")
        if isinstance(value, dict) and isinstance(base[key], dict) and key != "set":
            merge(base[key], value, [*path, key], source)
        else:
            base[key] = copy.deepcopy(value)


EXPONENT_ONLY = re.compile(r"[+-]?[0-9]+[eE][+-]?[0-9]+")


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--set {item}: expected key.path=value")
    try:
        value = yaml.load(text, Loader=LOADER) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    if isinstance(value, str) and EXPONENT_ONLY.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e-4 (no dot) as text; Python reads a number
    return key.strip(), value


def set_dotted(raw: dict, key: str, value: Any, source: str) -> None:
    node = raw
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise InputError(f"{source}: unknown section {where!r}{nearest(key, raw, [])}")
        node = child
    if parts[-1] not in node:
        raise InputError(f"{source}: unknown key {key!r}{nearest(key, raw, [])}")
    node[parts[-1]] = copy.deepcopy(value)


def fill_before_it_existed(raw: Any) -> Any:
    """`raw` (a params mapping or a recorded config), the knobs it lacks given the value
    they had before they existed, in place (where their section is there or missing)."""
    if not isinstance(raw, dict):
        return raw
    for key, value in BEFORE_IT_EXISTED.items():
        node = raw
        *sections, name = key.split(".")
        for section in sections:
            node = node.setdefault(section, {}) if isinstance(node, dict) else None
        if isinstance(node, dict) and name not in node:
            node[name] = value
    return raw


def dotted_keys(node: dict, prefix: list[str]) -> list[str]:
    keys = []
    for key, value in node.items():
        path = [*prefix, str(key)]
        keys += dotted_keys(value, path) if isinstance(value, dict) and value else [".".join(path)]
    return keys


def nearest(key: str, node: dict, prefix: list[str]) -> str:
    """'; did you mean ...?' with the closest valid dotted key, or nothing."""
    import difflib

    close = difflib.get_close_matches(key, dotted_keys(node, prefix), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


UNION_MEMBERS = ("bool", "int", "float", "str")  # how pydantic tags a union's alternatives


def names(message: str, key: str) -> bool:
    """Whether a message names a dotted key as a whole: `train.steps` is not named by
    `train.steps_per_update` nor by `agent.train.steps`."""
    return re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", message) is not None


def one_line(exc: ValidationError, source: str, origin: dict[str, str]) -> str:
    """The first problem, as `where: field: what, got value (and N more)`. A value that
    failed every alternative of a union (a group's `set`) is reported once, by its most
    telling failure (a NaN or infinity as such), without the union's member tags."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "finite_number"), errors[0])

    def path(error) -> str:
        return ".".join(str(p) for p in error["loc"] if p not in UNION_MEMBERS)

    field = path(first)
    others = len({path(e) for e in errors} - {field})
    errors = errors[: others + 1]
    where = next(
        (
            origin[key]
            for key in sorted(origin, key=len, reverse=True)
            if field == key
            or field.startswith(key + ".")
            or (not field and names(first["msg"], key))  # a check across fields names them
        ),
        source,
    )
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "missing"
    else:
        message = first["msg"].removeprefix("Value error, ")  # pydantic's tag for our checks
        message = message[0].lower() + message[1:]
        if "input" in first and not isinstance(first["input"], dict):
            message += f", got {first['input']!r}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    label = f"{field}: " if field else ""
    return f"{where}: {label}{message}{more}"


def key_mismatch(raw: dict, model: type[BaseModel], prefix: str = "") -> tuple[list, list]:
    """The dotted keys a full params mapping lacks and those it does not know, against the
    models (sections are models; a mapping such as study.groups is the file's own)."""
    lacks, unknown = [], [prefix + str(key) for key in raw if key not in model.model_fields]
    for name, field in model.model_fields.items():
        if name not in raw:
            lacks.append(prefix + name)
        elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            if isinstance(raw[name], dict):
                deeper = key_mismatch(raw[name], field.annotation, f"{prefix}{name}.")
                lacks, unknown = lacks + deeper[0], unknown + deeper[1]
    return lacks, unknown


def check_complete(raw: dict, model: type[BaseModel], source: str, version: str, notice) -> None:
    """A params file of another version: keys this one does not know are refused, in one
    line naming them all (a newer reprodqn's file, most often); keys it lacks take their
    defaults, which are the behaviour from before each knob existed, and `notice` (if any)
    is given one line naming them."""
    lacks, unknown = key_mismatch(raw, model)
    if unknown:
        also = f"; it also lacks {', '.join(lacks)}" if lacks else ""
        raise InputError(
            f"{source}: does not know {', '.join(unknown)}{also} (a params file of another "
            f"reprodqn version? this is {version}; `reprodqn params --explain` lists its keys)"
        )
    earlier = [f"{k}: {v}" for k, v in BEFORE_IT_EXISTED.items() if _lacks(raw, k)]
    fill_before_it_existed(raw)
    if lacks and notice is not None:
        values = f": {', '.join(earlier)}, the rest their defaults" if earlier else ""
        notice(
            f"{source}: lacks {', '.join(lacks)}, so they behave as before they existed"
            f"{values} (reprodqn {version})"
        )


def _lacks(raw: dict, key: str) -> bool:
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False
