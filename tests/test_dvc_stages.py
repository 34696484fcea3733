"""dvc.yaml: each stage depends on exactly the package modules it runs, so an edit reruns
what it affects and nothing else (the import graph is read from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from .conftest import ROOT

PACKAGE = ROOT / "src" / "reprodqn"

# stage -> the CLI handlers its command runs (study stages also run their jobs' commands)
STAGE_HANDLERS = {
    "conditions": ["cmd_conditions"],
    "audit": ["cmd_audit"],
    "candidates": ["cmd_candidates"],
    "ranker": ["cmd_ranker"],
    "select": ["cmd_select"],
    "train": ["cmd_study", "cmd_train"],
    "evaluate": ["cmd_study", "cmd_evaluate"],
    "report": ["cmd_report"],
}


def imported_modules(node: ast.AST) -> set[str]:
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith(
                "reprodqn"):
            if child.module == "reprodqn":
                found |= {f"reprodqn.{alias.name}" for alias in child.names}
            else:
                found.add(child.module)
        elif isinstance(child, ast.Import):
            found |= {a.name for a in child.names if a.name.startswith("reprodqn.")}
    return found


OTHER_COMMANDS = {"reprodqn.cli_forensics"}  # handlers no pipeline stage runs


def module_closure(modules: set[str]) -> set[str]:
    """Modules reachable by any import, at module level or inside functions (cli.py is
    followed per handler instead: its handlers import lazily, stage by stage)."""
    seen, todo = set(), list(modules)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == "reprodqn.cli":
            continue
        tree = ast.parse((PACKAGE / f"{name.split('.', 1)[1]}.py").read_text())
        if name in OTHER_COMMANDS:  # loading it runs its module-level imports, no handler
            todo += [m for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
                     for m in imported_modules(node)]
        else:
            todo += imported_modules(tree)
    return seen


def handler_closure(names: list[str]) -> set[str]:
    """The modules a CLI handler reaches, following calls to other functions of the
    command modules (cli.py and the modules of other commands)."""
    trees = {module: ast.parse((PACKAGE / f"{module.split('.', 1)[1]}.py").read_text())
             for module in ("reprodqn.cli", *sorted(OTHER_COMMANDS))}
    functions = {f.name: f for tree in trees.values() for f in tree.body
                 if isinstance(f, ast.FunctionDef)}
    modules, todo, seen = {"reprodqn.cli"}, list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        function = functions[name]
        modules |= imported_modules(function)
        todo += [c.func.id for c in ast.walk(function) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Name) and c.func.id in functions]
    module_level = [n for n in trees["reprodqn.cli"].body
                    if isinstance(n, ast.ImportFrom | ast.Import)]
    for node in module_level:
        modules |= imported_modules(node)
    return module_closure(modules)


PIPELINES = (ROOT / "dvc.yaml", ROOT / "start_sequences" / "dvc.yaml")


def all_stages() -> dict:
    stages = {}
    for path in PIPELINES:
        stages.update(yaml.safe_load(path.read_text())["stages"])
    return stages


def test_every_stage_depends_on_exactly_the_modules_it_runs():
    stages = all_stages()
    assert set(stages) == set(STAGE_HANDLERS)
    for stage, handlers in STAGE_HANDLERS.items():
        expected = {f"src/reprodqn/{m.split('.', 1)[1]}.py" for m in handler_closure(handlers)}
        declared = {d for d in stages[stage].get("deps", []) if d.startswith("src/")}
        assert declared == expected, (
            f"{stage}: missing {sorted(expected - declared)}, extra {sorted(declared - expected)}")


def test_stages_declare_the_params_sections_they_read():
    stages = all_stages()
    assert "study" in stages["train"]["params"] and "train" in stages["train"]["params"]
    assert "evaluation" not in stages["train"]["params"]  # evaluation knobs never retrain
    assert "results/fingerprint.json" in stages["train"]["deps"]
    assert "results/conditions.json" not in stages["train"]["deps"]  # only what changes numbers
    assert stages["train"]["outs"] == [{"runs": {"cache": False, "persist": True}}]
    assert stages["conditions"]["always_changed"] is True
    assert "${evaluation.start_sequences}" in stages["evaluate"]["deps"]
    assert Path(ROOT / ".dvcignore").read_text().count("__pycache__") == 1


def test_the_start_state_method_is_a_pipeline_of_its_own_run_at_the_workspace_root():
    """`dvc repro` at the root runs candidates, ranker and select only when evaluation
    depends on their output (tests/test_pipeline.py shows both choices)."""
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    method = yaml.safe_load(PIPELINES[1].read_text())["stages"]
    assert set(method) == {"candidates", "ranker", "select"} and not set(method) & set(root)
    assert all(stage["wdir"] == ".." for stage in method.values())
    assert "start_sequences/selected.json" in str(method["select"]["outs"])
