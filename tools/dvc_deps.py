"""`make dvc-deps`: rewrite the package-module dependencies of every stage in dvc.yaml and
start_sequences/dvc.yaml from the import graph, so an edit reruns exactly the stages whose
code it touches. Comments and every other line are kept; `--check` only reports."""

from __future__ import annotations

import re
import sys

from tools.package_graph import ROOT, handler_closure, source_files

PIPELINES = (ROOT / "dvc.yaml", ROOT / "start_sequences" / "dvc.yaml")

# stage -> the CLI handlers its command runs (study stages also run their jobs' commands)
STAGE_HANDLERS = {
    "conditions": ["cmd_conditions"],
    "audit": ["cmd_audit"],
    "candidates": ["cmd_candidates"],
    "ranker": ["cmd_ranker"],
    "select": ["cmd_select"],
    "train": ["cmd_study", "cmd_train"],
    "evaluation_states": ["cmd_which"],
    "evaluate": ["cmd_study", "cmd_evaluate"],
    "report": ["cmd_report"],
}

STAGE = re.compile(r"^  ([a-z_]+):(\s*#.*)?$")
SOURCE_DEP = re.compile(r"^      - src/reprodqn/\S+\.py$")


def expected_sources(stage: str) -> list[str]:
    return source_files(handler_closure(STAGE_HANDLERS[stage]))


def rewrite(text: str) -> str:
    """The pipeline file with each stage's src/reprodqn deps replaced, in place of the
    first one, by the modules its handlers reach."""
    out, stage, placed = [], None, False
    for line in text.splitlines(keepends=True):
        if found := STAGE.match(line.rstrip("\n")):
            stage, placed = found.group(1), False
        if stage in STAGE_HANDLERS and SOURCE_DEP.match(line.rstrip("\n")):
            if not placed:
                out += [f"      - {path}\n" for path in expected_sources(stage)]
                placed = True
            continue
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    stale = []
    for path in PIPELINES:
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            stale.append(path.relative_to(ROOT).as_posix())
            if "--check" not in argv:
                path.write_text(new)
    verb = "stale" if "--check" in argv else "rewrote"
    print(f"dvc-deps: {verb} {', '.join(stale)}" if stale else "dvc-deps: up to date")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
