"""`reprodqn params --explain [SECTION]`: every knob of params.yaml in words.

Nothing here is written twice: the type, range, default and description come from the
config models (config.py), the source ("paper", "code", "ours" and why) from the comment
beside the value in params.yaml, and the value in force from the loaded params.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, cast, get_args, get_origin

from pydantic import BaseModel

from reprodqn.config.params import Params
from reprodqn.core.errors import InputError

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def source_comments(params_path: Path) -> dict[str, str]:
    """'section.key' -> the comment beside it in a params file (two levels deep), with the
    comment-only lines indented under it that carry it on."""
    comments: dict[str, str] = {}
    section, last = None, None
    for line in Path(params_path).read_text().splitlines():
        top = re.match(r"^(\w+):", line)
        knob = re.match(r"^  (\w+):[^#]*#\s*(.+)$", line)
        more = re.match(r"^ {3,}#\s*(.+)$", line)
        if top:
            section, last = top.group(1), None
        elif knob and section:
            last = f"{section}.{knob.group(1)}"
            comments[last] = knob.group(2).strip()
        elif more and last:
            comments[last] += " " + more.group(1).strip()
        else:
            last = None
    return comments


def describe_type(annotation, metadata) -> str:
    """'int >= 1', 'float in [0, 1]', 'one of nature, nips' ..."""
    if get_origin(annotation) is Annotated:  # a constrained type inside a list (seeds)
        base, *extra = get_args(annotation)
        return describe_type(base, [m for item in extra for m in getattr(item, "metadata", [item])])
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(annotation))
    if get_origin(annotation) in (dict, list):
        inner = " -> ".join(describe_type(a, []) for a in get_args(annotation))
        return f"{get_origin(annotation).__name__} of {inner}"
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args and get_origin(annotation) is not None:
        text = " or ".join(describe_type(a, []) for a in args)
        return text + (" or null" if type(None) in get_args(annotation) else "")
    name = getattr(annotation, "__name__", str(annotation))
    for item in metadata:
        for attribute, symbol in _BOUNDS:
            bound = getattr(item, attribute, None)
            if bound is not None:
                name += f" {symbol} {bound}"
    return name


def _sections() -> list[str]:
    return [
        name
        for name, field in Params.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    ]


def _default(field) -> str:
    return "required" if field.is_required() else repr(field.get_default(call_default_factory=True))


def _entry_model(annotation) -> type[BaseModel] | None:
    """The model of each entry of a dict-of-models knob (study.groups), else None."""
    args = get_args(annotation)
    if get_origin(annotation) is dict and isinstance(args[1], type):
        return args[1] if issubclass(args[1], BaseModel) else None
    return None


def _knobs(params: Params, section: str, comments: dict[str, str]):
    """(key, type, default, value in force, description, source) of a section's knobs; a
    dict of models (study.groups) is followed by its entries' fields, as KEY.<name>.FIELD,
    their value in force given for the entries that set one."""
    model = cast(type[BaseModel], Params.model_fields[section].annotation)
    current = getattr(params, section)
    for key, field in model.model_fields.items():
        value = getattr(current, key)
        entry = _entry_model(field.annotation)
        kind = describe_type(field.annotation, field.metadata)
        if entry is not None:
            kind = f"dict of name -> {entry.__name__} (its fields: the rows below)"
        shown = ", ".join(value) if entry is not None else value
        yield (
            key,
            kind,
            _default(field),
            shown,
            field.description or "",
            comments.get(f"{section}.{key}", ""),
        )
        for name, sub in (entry.model_fields if entry is not None else {}).items():
            default = sub.get_default(call_default_factory=True)
            set_by = {k: getattr(v, name) for k, v in value.items() if getattr(v, name) != default}
            kind = describe_type(sub.annotation, sub.metadata)
            yield f"{key}.<name>.{name}", kind, _default(sub), set_by, sub.description or "", ""


def _summary(section: str) -> str:
    """The section model's docstring, its first paragraph on one line."""
    doc = (Params.model_fields[section].annotation.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def explain(params: Params, params_path: Path, section: str = "") -> str:
    """The knobs of every section (or of one), each with what it is and where it comes
    from; raises InputError naming the sections for an unknown one."""
    sections = _sections()
    if section and section not in sections:
        raise InputError(f"--explain {section}: expected one of {', '.join(sections)}")
    comments = source_comments(params_path)
    lines = []
    for name in [section] if section else sections:
        lines.append(f"[{name}]  {_summary(name)}")
        for key, kind, default, value, description, source in _knobs(params, name, comments):
            lines.append(f"  {name}.{key}: {kind}; default {default}; now {value!r}")
            if description:
                lines.append(f"      {description}")
            if source:
                lines.append(f"      source: {source}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def reference_page(params: Params, params_path: Path) -> str:
    """The documentation site's parameter reference: the same knobs as `explain`, as one
    Markdown table per section, the value params.yaml sets beside the model's default."""
    comments = source_comments(params_path)
    lines = [
        "---",
        "hide: [toc]  # the tables need the width; the sections are linked below the title",
        "---",
        "",
        "# Parameters",
        "",
        "Every knob of `params.yaml`, generated from the params models' own "
        "descriptions (`make docs-tables`; a test keeps it current). "
        "`reprodqn params --explain [SECTION]` prints the same, with the values in "
        "force after presets and `--set`.",
        "",
        "Sections: " + " · ".join(f"[`{name}`](#{name})" for name in _sections()),
        "",
    ]
    for name in _sections():
        lines += [
            f"## `{name}`",
            "",
            _summary(name),
            "",
            "| knob | type | default | what it is | source |",
            "|---|---|---|---|---|",
        ]
        for key, kind, default, value, description, source in _knobs(params, name, comments):
            shown = f"`{default}`"
            if key != "groups" and "<name>" not in key and repr(value) != default:
                shown += f" (params.yaml: `{value!r}`)"
            cells = [f"`{name}.{key}`", kind, shown, description, source]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def departures(params: Params) -> list[dict]:
    """Every value in force that differs from its default, the paper's or the authors'
    code's as params.yaml gives them: a study's scale and agent in one list, for its
    report. The groups' own overrides are the study's design, not departures."""
    found = []

    def walk(model: BaseModel, prefix: str) -> None:
        for key, field in type(model).model_fields.items():
            value = getattr(model, key)
            if isinstance(value, BaseModel):
                walk(value, f"{prefix}{key}.")
            elif key != "groups" and not field.is_required():
                default = field.get_default(call_default_factory=True)
                if value != default:
                    found.append(
                        {
                            "key": f"{prefix}{key}",
                            "value": value,
                            "default": default,
                            "what": field.description or "",
                        }
                    )

    walk(params, "")
    return found
