"""`make docs-tables`: the development page's module table, grouped by subpackage in
data-flow order (each with its `__init__` summary), every module with the first sentence of
its docstring."""

from __future__ import annotations

import ast
import re

from tools.package_graph import (
    PUBLIC_MODULES,
    ROOT,
    declared_layers,
    layer_order,
    module_path,
    modules,
)

PAGE = ROOT / "docs" / "development.md"
MODULE_TABLE = re.compile(r"(<!-- modules -->\n)(.*?)(<!-- /modules -->)", re.S)


def first_sentence(tree: ast.Module) -> str:
    doc = " ".join((ast.get_docstring(tree) or "").split())
    return re.split(r"(?<=\.)\s", doc, maxsplit=1)[0].rstrip(".")


def module_table() -> str:
    found = modules()
    rows = []
    for package in layer_order(declared_layers()):
        init = ast.parse(module_path(f"reprodqn.{package}").read_text())
        if package in PUBLIC_MODULES:
            rows += [f"**`{package}.py`** (public API) — {first_sentence(init)}.", ""]
            continue
        rows += [
            f"**`{package}/`** — {first_sentence(init)}.",
            "",
            "| module | what it is |",
            "|---|---|",
        ]
        rows += [
            f"| `{name.split('.', 2)[2]}` | {first_sentence(tree)} |"
            for name, tree in found.items()
            if name.split(".")[1] == package
        ]
        rows.append("")
    return "\n".join(rows)


def page_with_table(text: str) -> str:
    return MODULE_TABLE.sub(lambda m: m.group(1) + module_table() + m.group(3), text)


if __name__ == "__main__":
    PAGE.write_text(page_with_table(PAGE.read_text()))
