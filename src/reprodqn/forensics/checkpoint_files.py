"""A run's checkpoint files against its chain: each checkpoints/step-N.safetensors must hold
the weights whose SHA-256 the chain's line for step N records, and a run that keeps
checkpoint files keeps one for every line. The chain is what verify compares; without this
a flipped byte, another run's file swapped in or a deleted file went unseen."""

from __future__ import annotations

import re
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.digests import apart
from reprodqn.core.errors import InputError

CHECKPOINT_NAME = re.compile(r"step-(\d+)\.safetensors")


class CheckpointMismatch(InputError):
    """A checkpoint file whose weights are not its chain line's, or that is missing (one
    line naming it)."""


def check_run(run_dir: Path, relative_to: Path | None = None, every_line: bool = True) -> int:
    """Check every checkpoint file of the run in `run_dir` against its hashes.jsonl (names
    said relative to `relative_to`), and with `every_line` that a run holding any holds
    one for each line; how many there were. Torch loads only where one is."""
    run_dir = Path(run_dir)
    paths = sorted(workspace.checkpoints_dir(run_dir).glob("*.safetensors"))
    if not paths:
        return 0
    from reprodqn.determinism.checkpoints import load_weights

    lines = workspace.read_hashes(run_dir)
    if every_line:
        _refuse_missing(run_dir, lines, len(paths), relative_to)
    chain = {line["step"]: line for line in lines}
    for path in paths:
        name = _name(path, relative_to)
        matched = CHECKPOINT_NAME.fullmatch(path.name)
        line = chain.get(int(matched.group(1))) if matched else None
        if line is None:
            raise CheckpointMismatch(
                f"{name}: no line of its run's {workspace.HASHES} has its step "
                "(a checkpoint from elsewhere?)"
            )
        try:
            _, metadata = load_weights(path)  # the file against the hash it carries
        except InputError as error:
            raise CheckpointMismatch(f"{name}: {str(error).split(': ', 1)[-1]}") from None
        actual, recorded = metadata["weights_sha256"], str(line.get(workspace.CHAINS["weights"]))
        if actual != recorded:
            shown = apart(actual, recorded)  # a line changed past 12 characters reads apart
            raise CheckpointMismatch(
                f"{name}: weights SHA-256 {shown[0]}, but its chain's line for step "
                f"{line['step']} records {shown[1]} (another run's or step's checkpoint, or "
                f"an edited {workspace.HASHES}?)"
            )
    return len(paths)


def _refuse_missing(run_dir: Path, lines: list[dict], held: int, relative_to) -> None:
    """A run holding checkpoint files holds one for each line of its chain (HashChain writes
    both together): a missing one was deleted or left behind in a copy, and the weights
    of its step would go unchecked."""
    for number, line in enumerate(lines, 1):
        path = workspace.checkpoint_path(run_dir, line["step"])
        if not path.exists():
            raise CheckpointMismatch(
                f"{_name(path, relative_to)}: missing checkpoint file (line {number} of its "
                f"run's {workspace.HASHES} records step {line['step']}, and the run holds "
                f"{held} other checkpoint file{'' if held == 1 else 's'}): deleted, or not copied "
                "with the run"
            )


def check_runs(run_dirs, relative_to: Path | None = None) -> int:
    """check_run over several runs; the checkpoints checked in all."""
    return sum(check_run(run_dir, relative_to) for run_dir in run_dirs)


def _name(path: Path, relative_to: Path | None) -> str:
    if relative_to is not None:
        try:
            return path.relative_to(relative_to).as_posix()
        except ValueError:
            pass
    return str(path)


def check_study(roots, study) -> int:
    """check_run over every run of `study` (params.study) in each of the workspaces or
    unpacked bundles `roots`; the checkpoints checked in all."""
    return sum(
        check_run(workspace.run_dir(Path(root) / workspace.RUNS, group, run))
        for root in roots
        for group in study.studied_groups()
        for run in range(study.runs(group))
    )
