"""A study's runs read back from a workspace or an unpacked bundle (runs/ and evaluations/):
what the report stage and `reprodqn verify` both start from."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.evaluation import blindness
from reprodqn.report.analysis import RunResult


def load_run(run_dir: Path, eval_dir: Path, group: str, run: int) -> RunResult:
    result = RunResult(group, run, workspace.read_hashes(run_dir))
    result.process = workspace.read_process(run_dir)
    result.probe = blindness.read_probe(eval_dir)
    result.scores = workspace.eval_scores(eval_dir)
    result.steps = sorted(result.scores)
    if (eval_dir / workspace.EVAL_JSON).exists():
        result.start_states = read_json(eval_dir / workspace.EVAL_JSON, "evaluation record").get(
            "start_states"
        )
    if (run_dir / workspace.CONDITIONS).exists():
        result.conditions = read_json(run_dir / workspace.CONDITIONS, "run conditions")
    return result


def load_study(root: Path, study) -> dict[str, list[RunResult]]:
    """Every run of a workspace (or an unpacked bundle): runs/ and evaluations/, for each
    group the study trains (`study`: params.study)."""
    root = Path(root)
    return {
        g: [
            load_run(
                workspace.run_dir(root / workspace.RUNS, g, r),
                workspace.eval_dir(root / workspace.EVALUATIONS, g, r),
                g,
                r,
            )
            for r in range(study.runs(g))
        ]
        for g in study.studied_groups()
    }


def require_evaluated(runs: dict[str, list[RunResult]], root: Path) -> None:
    """A report needs scores: with none, one line saying where they were looked for."""
    if not any(result.scores for results in runs.values() for result in results):
        raise InputError(
            f"{Path(root) / workspace.EVALUATIONS}: no evaluated run of this study's groups "
            "there (evaluations/GROUP/RUN); `reprodqn study evaluate` makes them, or --root "
            "names a study that has them"
        )
