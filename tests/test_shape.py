"""The package's shape: subpackages that import only the layers their `__init__` allows,
one concern per module, short functions, no import cycles, one owner for every record
name, and documentation whose module table, paper map and parameter reference name what
there is."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.helpers import ROOT
from tools.cli_table import COMMAND_TABLE, OPTION_LISTS, command_table, option_lists, subcommands
from tools.laptop_table import README, TABLE1, laptop_table
from tools.module_table import MODULE_TABLE, PAGE, module_table
from tools.package_graph import (
    PACKAGE,
    PUBLIC_MODULES,
    declared_layers,
    import_graph,
    layer_order,
    layer_violations,
    module_path,
    modules,
    subpackages,
)
from tools.params_reference import parameters_page

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_every_module_sits_in_a_subpackage_that_says_what_it_may_import():
    """...but the public modules, each a layer of its own."""
    top = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert top == set(PUBLIC_MODULES)
    layers = declared_layers()
    assert set(layers) == {
        "exact",
        "core",
        "universal",
        "determinism",
        "config",
        "dqn",
        "training",
        "evaluation",
        "envs",
        "study",
        "report",
        "forensics",
        "cli",
    }
    assert layers["core"] == set() and all(set(a) <= set(layers) for a in layers.values())


# registers its environments on import, as ale-py's module does (gym.register_envs)
RUNS_ON_IMPORT = ("envs",)


def test_subpackage_inits_hold_only_their_docstring():
    """dvc.yaml leaves the `__init__` files out of a stage's code: they must run nothing,
    but in a subpackage no stage runs."""
    for package in subpackages():
        tree = ast.parse(module_path(f"reprodqn.{package}").read_text())
        if package in RUNS_ON_IMPORT:
            assert (
                ast.get_docstring(tree)
                and f"reprodqn/{package}/" not in (ROOT / "dvc.yaml").read_text()
            )
            continue
        assert len(tree.body) == 1 and ast.get_docstring(tree), package


def test_imports_follow_the_data_flow_between_subpackages():
    """Each subpackage imports only those its `__init__` names; the layers form no cycle."""
    graph, layers = import_graph(), declared_layers()
    assert not layer_violations(graph, layers)
    planted = {**graph, "reprodqn.core.workspace": {"reprodqn.training.loop"}}
    assert layer_violations(planted, layers) == [
        "reprodqn.core.workspace imports reprodqn.training.loop"
    ]  # the check can fail
    order = layer_order(layers)  # raises on a cycle
    assert order[0] == "core" and order[-1] == "cli"
    with pytest.raises(ValueError, match="cycle"):
        layer_order({**layers, "core": {"cli"}})


def test_no_module_is_longer_than_its_concern_allows():
    long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
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
    graph = import_graph()
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


def test_module_table_names_every_module_with_its_docstring_summary():
    """The development page lists each module once under its subpackage, with its
    docstring's first sentence; `make docs-tables` rewrites the table from the package."""
    found = MODULE_TABLE.search(PAGE.read_text())
    assert found, f"{PAGE.name} has no <!-- modules --> table"
    table = module_table()
    assert found.group(2) == table, "the module table is stale: run make docs-tables"
    assert all(f"`{name.split('.', 2)[-1]}" in table for name in modules())


def record_name_literals(tree: ast.Module) -> list[str]:
    """String constants in code (docstrings aside) that spell a record's file name."""
    from reprodqn.core import workspace

    names = {
        value
        for key, value in vars(workspace).items()
        if key.isupper() and isinstance(value, str) and "." in value
    }
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
    ]


def test_record_names_are_spelled_only_in_workspace():
    """One owner for every run-folder and result file name: a literal elsewhere fails."""
    spelled = {
        name: found
        for name, tree in modules().items()
        if name != "reprodqn.core.workspace" and (found := record_name_literals(tree))
    }
    assert not spelled
    planted = ast.parse('path = run_dir / "complete.json"\n')
    assert record_name_literals(planted) == ["complete.json"]  # the check can fail


def test_digests_are_made_only_in_core_digests():
    """sha256 of canonical JSON is written once (core.digests); a module hashing JSON by
    hand would make a second, possibly different, digest of the same value."""
    by_hand = [
        name
        for name, tree in modules().items()
        if name != "reprodqn.core.digests"
        and any(
            isinstance(n, ast.Attribute)
            and n.attr == "dumps"
            and isinstance(n.value, ast.Name)
            and n.value.id == "json"
            for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "sha256"
            for n in ast.walk(call)
        )
    ]
    assert not by_hand


def test_the_parameter_reference_is_generated_from_the_params_models():
    """docs/parameters.md is the models' descriptions and params.yaml's comments, current."""
    assert (ROOT / "docs" / "parameters.md").read_text() == parameters_page(), (
        "docs/parameters.md is stale: run make docs-tables"
    )
    assert "| `replay.capacity` |" in parameters_page()


def test_the_command_page_lists_every_subcommand_from_the_parser():
    """docs/cli.md's command list is the parser's help, current: a subcommand added without
    `make docs-tables` fails here."""
    from reprodqn.cli.main import build_parser

    found = COMMAND_TABLE.search((ROOT / "docs" / "cli.md").read_text())
    assert found, "docs/cli.md has no <!-- commands --> list"
    assert found.group(2) == command_table(), "docs/cli.md is stale: run make docs-tables"
    options = OPTION_LISTS.search((ROOT / "docs" / "cli.md").read_text())
    assert options, "docs/cli.md has no <!-- options --> list"
    assert options.group(2) == option_lists(), "docs/cli.md is stale: run make docs-tables"
    assert "- `--attest KEY`: with --reference BUNDLE" in options.group(2)
    listed = {command for command, _, _ in subcommands(build_parser())}
    assert {"train", "study", "start-states import", "trace-diff", "gpu-check"} <= listed
    assert "start-states" not in listed  # a group, listed by its leaves


def test_the_readme_table1_is_the_committed_laptop_reports():
    """The README's Table 1 (which the laptop page includes) is reference/laptop's own
    report: a reference remade without `make docs-tables` fails here."""
    found = TABLE1.search(README.read_text())
    assert found, "README.md has no table1 snippet"
    table = laptop_table()
    assert found.group(2) == table, "README.md's Table 1 is stale: run make docs-tables"
    assert "| deterministic | " in table


def test_every_name_in_the_paper_map_resolves():
    """The fidelity page's map from the paper to the code names real functions and
    classes."""
    text = (ROOT / "docs" / "fidelity.md").read_text()
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
