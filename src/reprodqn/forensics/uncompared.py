"""The files of a run folder that `verify A B` does not compare: it reads the chain, the
checkpoint files, config.json and conditions.json, so a log kept beside them (episode
returns in a returns.jsonl) can differ while verify says identical. Named, each side's
bytes said where they differ, so "identical" is never read as covering them."""

from __future__ import annotations

import os
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.digests import sha256_file

# what verify compares, and what records how a run was made rather than what it computed
READ_OR_MACHINERY = {
    *(workspace.HASHES, workspace.RUN_CONFIG, workspace.CONDITIONS),
    *(workspace.DETERMINISM, workspace.SBOM, workspace.COMPLETE, workspace.PROGRESS_RECORD),
    workspace.ACTOR_WORKERS,
}
SHOWN = 6  # names in the line; the rest counted


def files(run_dir: Path) -> set[str]:
    """The run's files verify does not compare, relative to it: none of its resume points,
    checkpoint files, hidden files (a lock, a temporary file) or runs nested in it."""
    found = set()
    for parent, children, names in os.walk(run_dir):
        here = Path(parent)
        if here != run_dir and workspace.HASHES in names:  # a run of its own: compared as one
            children[:] = []
            continue
        children[:] = sorted(c for c in children if not c.startswith(".") and c != workspace.RESUME)
        for name in names:
            path = (here / name).relative_to(run_dir)
            checkpoint = path.parts[0] == workspace.CHECKPOINTS and name.endswith(".safetensors")
            top_record = len(path.parts) == 1 and name in READ_OR_MACHINERY
            if not (name.startswith(".") or checkpoint or top_record):
                found.add(path.as_posix())
    return found


def pairs(mine: dict[str, Path], theirs: dict[str, Path], shared: list[str]) -> list[str]:
    """Each uncompared file of the shared runs, by its path under the folders compared, with
    "(bytes differ)" or "(one side only)" where the two sides' copies are not the same."""
    said = []
    for run in shared:
        ours, reference = files(mine[run]), files(theirs[run])
        for name in sorted(ours | reference):
            where = name if run == "." else f"{run}/{name}"
            if name not in ours or name not in reference:
                where += " (one side only)"
            elif sha256_file(mine[run] / name) != sha256_file(theirs[run] / name):
                where += " (bytes differ)"
            said.append(where)
    return said


def line(names: list[str], declared: bool) -> list[str]:
    """verify's line naming them (none where there are none)."""
    if not names:
        return []
    shown = ", ".join(names[:SHOWN]) + (
        f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    )
    note = (
        "; result logs declared to the chain (HashChain(out, results=[log])) are compared "
        "through its lines"
        if declared
        else "; declare result logs to the chain (HashChain(out, results=[log])) to compare them"
    )
    return [f"not compared (outside the chains): {shown}{note}"]
