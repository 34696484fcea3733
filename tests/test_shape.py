"""The package's shape: one concern per module, short functions, no import cycles, and the
README's module table naming exactly the modules there are."""

from __future__ import annotations

import ast
import re

from .conftest import ROOT
from .test_dvc_stages import PACKAGE, imported_modules

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, ast.Module]:
    return {f"reprodqn.{p.stem}": ast.parse(p.read_text()) for p in sorted(PACKAGE.glob("*.py"))
            if p.stem != "__init__"}


def test_no_module_is_longer_than_its_concern_allows():
    long = {p.name: n for p in PACKAGE.glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long


def test_no_function_is_longer_than_sixty_lines():
    long = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} ({length} lines)")
    assert not long


def test_no_import_cycle_even_through_imports_inside_functions():
    graph = {name: {m for m in imported_modules(tree) if m != name}
             for name, tree in modules().items()}
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return [*path, node, child]
            if child not in state and (cycle := visit(child, [*path, node])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [])
            assert cycle is None, " -> ".join(cycle)


MODULE_TABLE = re.compile(r"(<!-- modules -->\n)(.*?)(<!-- /modules -->)", re.S)


def module_table() -> str:
    """The README's module table: every module with the first sentence of its docstring."""
    rows = ["| module | what it is |", "|---|---|"]
    for name, tree in modules().items():
        doc = " ".join((ast.get_docstring(tree) or "").split())
        first = re.split(r"(?<=\.)\s", doc, maxsplit=1)[0].rstrip(".")
        rows.append(f"| `{name.split('.', 1)[1]}` | {first} |")
    return "\n".join(rows) + "\n"


def test_readme_module_table_names_every_module_with_its_docstring_summary():
    """The README lists each module once, with its docstring's first sentence; `make readme`
    rewrites the table from the package."""
    found = MODULE_TABLE.search((ROOT / "README.md").read_text())
    assert found, "README.md has no <!-- modules --> table"
    assert found.group(2) == module_table(), "README's module table is stale: run make readme"


if __name__ == "__main__":  # make readme
    readme = ROOT / "README.md"
    readme.write_text(MODULE_TABLE.sub(lambda m: m.group(1) + module_table() + m.group(3),
                                       readme.read_text()))


def record_name_literals(tree: ast.Module) -> list[str]:
    """String constants in code (docstrings aside) that spell a record's file name."""
    from reprodqn import workspace

    names = {value for key, value in vars(workspace).items()
             if key.isupper() and isinstance(value, str) and "." in value}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and node.value in names and id(node) not in docstrings]


def test_record_names_are_spelled_only_in_workspace():
    """One owner for every run-folder and result file name: a literal elsewhere fails."""
    spelled = {name: found for name, tree in modules().items()
               if name != "reprodqn.workspace" and (found := record_name_literals(tree))}
    assert not spelled
    planted = ast.parse('path = run_dir / "complete.json"\n')
    assert record_name_literals(planted) == ["complete.json"]  # the check can fail


def test_every_name_in_the_readme_paper_map_resolves():
    """The README's map from the paper to the code names real functions and classes."""
    import importlib

    text = (ROOT / "README.md").read_text()
    section = text.split("## From the paper to the code", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"`(reprodqn\.[\w.]+)`", section)
    assert len(names) >= 20
    missing = []
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                target = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                target = getattr(target, attribute, None)
            if target is None:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert not missing
