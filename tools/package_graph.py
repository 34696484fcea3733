"""The package's import graph read from its source (imports inside functions included),
its subpackage layers as each `__init__.py` declares them, and the modules each CLI
handler reaches: what the shape tests check and what `make readme` and `make dvc-deps`
write."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "reprodqn"
COMMANDS = "reprodqn.cli.main"  # the dispatcher: its handlers import lazily, stage by stage
OTHER_COMMANDS = ("reprodqn.cli.forensics", "reprodqn.cli.start_states", "reprodqn.cli.tools")
# the package's public modules: one file each, a layer of its own (its docstring says what it
# may import); everything else sits in a subpackage and is internal
PUBLIC_MODULES = ("exact",)


def module_path(name: str) -> Path:
    path = SRC / Path(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_package(name: str) -> bool:
    return (SRC / Path(*name.split("."))).is_dir()


def modules() -> dict[str, ast.Module]:
    """Every module of the package (subpackages' `__init__` aside), by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem in ("__init__", "__main__"):
            continue
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name] = ast.parse(path.read_text())
    return found


def subpackages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def layers() -> list[str]:
    """The subpackages and the public modules: the units the import rules speak of."""
    return sorted([*subpackages(), *PUBLIC_MODULES])


def imported_modules(node: ast.AST) -> set[str]:
    """The reprodqn modules an AST imports (`from reprodqn.core import workspace` imports
    the module reprodqn.core.workspace)."""
    found = set()
    for child in ast.walk(node):
        if (
            isinstance(child, ast.ImportFrom)
            and child.module
            and (child.module == "reprodqn" or child.module.startswith("reprodqn."))
        ):
            if is_package(child.module):
                found |= {
                    f"{child.module}.{a.name}"
                    for a in child.names
                    if module_path(f"{child.module}.{a.name}").exists()
                }
            else:
                found.add(child.module)
        elif isinstance(child, ast.Import):
            found |= {a.name for a in child.names if a.name.startswith("reprodqn.")}
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(tree) - {name} for name, tree in modules().items()}


def subpackage(name: str) -> str:
    return name.split(".")[1]


LAYER_LINE = re.compile(r"^May import: (.*?)\.$", re.M | re.S)


def declared_layers() -> dict[str, set[str]]:
    """What each subpackage may import, from the `May import:` line of its `__init__.py`
    (a public module's: of its own docstring)."""
    found_layers = {}
    for package in layers():
        doc = ast.get_docstring(ast.parse(module_path(f"reprodqn.{package}").read_text())) or ""
        found = LAYER_LINE.search(doc)
        allowed = " ".join(found.group(1).split()) if found else ""
        found_layers[package] = (
            set()
            if allowed == "nothing else of reprodqn"
            else {a.strip() for a in allowed.split(",") if a.strip()}
        )
    return found_layers


def layer_order(layers: dict[str, set[str]]) -> list[str]:
    """The subpackages in data-flow order: each after everything it may import (ties by
    name). Raises ValueError when the declared layers form a cycle."""
    order: list[str] = []
    todo = dict(layers)
    while todo:
        ready = sorted(p for p, allowed in todo.items() if allowed <= set(order))
        if not ready:
            raise ValueError(f"the declared layers form a cycle: {sorted(todo)}")
        order += ready
        todo = {p: a for p, a in todo.items() if p not in ready}
    return order


def layer_violations(graph: dict[str, set[str]], layers: dict[str, set[str]]) -> list[str]:
    """Imports from one subpackage into another its `__init__` does not allow."""
    return sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        for target in targets
        if subpackage(target) != subpackage(name)
        and subpackage(target) not in layers[subpackage(name)]
    )


def module_closure(start: set[str]) -> set[str]:
    """Modules reachable by any import, at module level or inside functions (the
    dispatcher is followed per handler instead: see handler_closure)."""
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == COMMANDS:
            continue
        tree = ast.parse(module_path(name).read_text())
        if name in OTHER_COMMANDS:  # loading it runs its module-level imports, no handler
            todo += [
                m
                for node in tree.body
                if isinstance(node, ast.Import | ast.ImportFrom)
                for m in imported_modules(node)
            ]
        else:
            todo += imported_modules(tree)
    return seen


def handler_closure(handlers: list[str]) -> set[str]:
    """The modules CLI handlers reach, following their calls to other functions of the
    command modules."""
    trees = {m: ast.parse(module_path(m).read_text()) for m in (COMMANDS, *OTHER_COMMANDS)}
    functions = {
        f.name: f for tree in trees.values() for f in tree.body if isinstance(f, ast.FunctionDef)
    }
    found, todo, seen = {COMMANDS}, list(handlers), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        function = functions[name]
        found |= imported_modules(function)
        todo += [
            c.func.id
            for c in ast.walk(function)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in functions
        ]
    for node in trees[COMMANDS].body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            found |= imported_modules(node)
    return module_closure(found)


def source_files(names: set[str]) -> list[str]:
    """The files of these modules, as dvc.yaml names them."""
    return sorted(module_path(n).relative_to(ROOT).as_posix() for n in names)
