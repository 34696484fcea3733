"""`reprodqn verify BUNDLE --evaluate K`: K evaluation episodes played again from the
checkpoints the bundle ships (`reprodqn bundle --checkpoints`), each against its row in the
shipped eval.csv. The report link shows that the report is what the eval.csv files give;
this shows that the eval.csv files are what the checkpoints play.

The K episodes are evenly spaced over every eval.csv row of a shipped checkpoint, taken
in a fixed order (the study's groups, runs, steps, episodes): the same K always picks the
same episodes, and K at least the number of rows plays them all."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import workspace
from reprodqn.forensics.chains import plural
from reprodqn.forensics.checkpoint_files import CHECKPOINT_NAME

NOTHING_SHIPPED = "no checkpoints shipped (bundle --checkpoints ships them): nothing replayed"


def shipped_rows(directory: Path, study) -> list[tuple[str, int, int, dict]]:
    """(group, run, step, row) for each eval.csv row of a checkpoint the bundle ships, in
    the study's order of groups and runs, then by step and episode."""
    rows = []
    for group in study.studied_groups():
        for run in range(study.runs(group)):
            run_dir = workspace.run_dir(directory / workspace.RUNS, group, run)
            steps = _shipped_steps(run_dir)
            eval_dir = workspace.eval_dir(directory / workspace.EVALUATIONS, group, run)
            if not steps or not (eval_dir / workspace.EVAL_CSV).exists():
                continue
            found = [row for row in workspace.read_eval(eval_dir) if int(row["step"]) in steps]
            found.sort(key=lambda row: (int(row["step"]), int(row["episode"])))
            rows += [(group, run, int(row["step"]), row) for row in found]
    return rows


def _shipped_steps(run_dir: Path) -> set[int]:
    names = (CHECKPOINT_NAME.fullmatch(p.name) for p in _shipped(run_dir))
    return {int(matched.group(1)) for matched in names if matched}


def _shipped(run_dir: Path) -> list[Path]:
    return list(workspace.checkpoints_dir(run_dir).glob("*.safetensors"))


def evenly_spaced(items: list, count: int) -> list:
    """`count` of `items` at even spacing from the first (all of them when count >= len)."""
    if count >= len(items):
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def replay(directory: Path, params, count: int) -> str:
    """Play `count` sampled episodes from the shipped checkpoints: what was replayed, in one
    line. Raises Mismatch naming the first episode whose result is not its eval.csv row."""
    from reprodqn.config.params import resolve_run
    from reprodqn.forensics.rerun import replay_rows

    if not any(_shipped(run_dir) for run_dir in (directory / workspace.RUNS).glob("*/*")):
        return NOTHING_SHIPPED
    rows = shipped_rows(directory, params.study)
    if not rows:
        return "no eval.csv row is of a shipped checkpoint: nothing replayed"
    sample = evenly_spaced(rows, count)
    by_checkpoint: dict[tuple[str, int, int], dict[int, dict]] = {}
    for group, run, step, row in sample:
        episode = int(row["episode"])
        if episode >= params.evaluation.episodes:
            raise Mismatch(
                f"evaluations/{group}/{run}/{workspace.EVAL_CSV}: step {step} episode "
                f"{episode}, but params.yaml's evaluation has {params.evaluation.episodes}"
            )
        by_checkpoint.setdefault((group, run, step), {})[episode] = row
    for (group, run, step), wanted in by_checkpoint.items():
        config = resolve_run(params, group, run)
        run_dir = workspace.run_dir(directory / workspace.RUNS, group, run)
        line = {line["step"]: line for line in workspace.read_hashes(run_dir)}[step]
        _, first = replay_rows(
            directory,
            config,
            params.evaluation,
            workspace.checkpoint_path(run_dir, step),
            line[workspace.CHAINS["weights"]],
            wanted,
        )
        if first is not None:
            values = "; ".join(
                f"{k} played {first['ours'][k]}, eval.csv {first['theirs'][k]}"
                for k in first["fields"]
            )
            raise Mismatch(
                f"{group}/{run} checkpoint step {step} episode {first['episode']} plays "
                f"otherwise than evaluations/{group}/{run}/{workspace.EVAL_CSV} ({values})"
            )
    return (
        f"{plural(len(sample), 'episode')} evenly spaced over the {len(rows)} eval.csv rows "
        f"of shipped checkpoints ({_named(by_checkpoint)}) replayed, each gives its row"
    )


def _named(by_checkpoint: dict) -> str:
    """The checkpoints played: 'deterministic/0 step 0 episodes 0, 3; ...'."""
    return "; ".join(
        f"{group}/{run} step {step} episode{'s' if len(rows) > 1 else ''} "
        + ", ".join(str(e) for e in sorted(rows))
        for (group, run, step), rows in by_checkpoint.items()
    )


class Mismatch(Exception):
    """A replayed episode (or a sampled row) that is not what the bundle says: one line."""
