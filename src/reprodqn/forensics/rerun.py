"""Retrain one run of a shipped study up to a step, outside the workspace, and compare the
prefix of its chains with the shipped ones: an artifact evaluator's spot-check in minutes.
Also makes the resume points a bundle ships, so a spot-check can start late in a run."""

from __future__ import annotations

import shutil
from pathlib import Path

from reprodqn.config.params import RunConfig, load_params, resolve_run
from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.core.events import CheckpointWritten, ProcessRecord

CHAINS = (*workspace.CHAINS.values(), "updates")  # a spot-check also compares the count
TIMINGS = ("steps_per_second",)  # the one field of a process record that is the machine's
LOGS = workspace.RUN_LOGS
SHIPPED_LOGS = "logs"  # beside a shipped resume point: the run's logs as they were there


def parse_run(text: str) -> tuple[str, int]:
    """'GROUP/RUN' -> (group, run)."""
    group, _, run = str(text).partition("/")
    if not group or not run.isdigit():
        raise InputError(f"--rerun {text}: expected GROUP/RUN, e.g. deterministic/0")
    return group, int(run)


def shipped_config(
    reference: Path, group: str, run: int, fallback: Path, overrides=()
) -> RunConfig:
    """The run's config from the reference's own params.yaml (else `fallback`), checked
    against the digest its run directory recorded."""
    params_path = shipped_params(reference, fallback)
    try:
        config = resolve_run(load_params(params_path, overrides), group, run)
    except InputError as error:  # resolve_run speaks of --group and --run
        raise InputError(f"--rerun {group}/{run}: {str(error).split(': ', 1)[-1]}") from None
    recorded_path = workspace.run_dir(reference / workspace.RUNS, group, run) / workspace.RUN_CONFIG
    if not recorded_path.exists():
        raise InputError(f"{recorded_path}: not found; the reference has no run {group}/{run}")
    recorded = read_json(recorded_path, "run config")
    if recorded.get("digest") != config.digest():
        from reprodqn.determinism.provenance import differing_values

        changed = differing_values(
            config.model_dump(mode="json"), recorded.get("config") or {}, ("here", "shipped")
        )
        raise InputError(
            f"{params_path}: its params give {group}/{run} digest "
            f"{config.digest()[:12]}, but {recorded_path} records "
            f"{str(recorded.get('digest'))[:12]} (mismatched params"
            + (f": {'; '.join(changed)})" if changed else ")")
        )
    return config


def shipped_params(reference: Path, fallback: Path) -> Path:
    """The reference's own params.yaml, else `fallback` (a reference copy without one)."""
    params_path = Path(reference) / "params.yaml"
    return params_path if params_path.exists() else Path(fallback)


def shipped_resume_point(reference: Path, group: str, run: int, until: int) -> Path | None:
    """A resume directory the reference ships for this run before `until` (one at `until`
    itself would leave nothing to compute)."""
    resume_dir = workspace.resume_points_dir(reference, group, run)
    step = workspace.latest_resume_step(resume_dir)
    if step is not None and step < until:
        return resume_dir
    return None


def train_until(
    config: RunConfig,
    scratch: Path,
    until: int,
    resume_dir: Path | None = None,
    progress=None,
    reference_run: Path | None = None,
) -> Path:
    """Train `config` from scratch (or from a shipped `resume_dir` and the logs beside it)
    into `scratch`, stopping at step `until` with a resume point there. With
    `reference_run`, stop sooner, at the first checkpoint whose record differs from its
    record there: `compare_prefix` then finds the same first difference as after the whole
    prefix (checkpoints are compared first, in step order), minutes earlier."""
    from reprodqn.training.loop import train

    if until < 0:
        raise InputError(f"--until {until}: expected a step >= 0")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    if resume_dir is not None:
        shutil.copytree(
            resume_dir, workspace.resume_dir(scratch), ignore=shutil.ignore_patterns(SHIPPED_LOGS)
        )
        for name in LOGS:  # process lines hold timings: the reference's differ in length
            if not (resume_dir / SHIPPED_LOGS / name).exists():
                raise InputError(
                    f"{resume_dir / SHIPPED_LOGS / name}: missing from the shipped resume point"
                )
            shutil.copyfile(resume_dir / SHIPPED_LOGS / name, scratch / name)
    expected = (
        {line["step"]: line for line in workspace.read_hashes(reference_run)}
        if reference_run is not None
        else {}
    )
    for event in train(config, scratch, until=until):
        if progress is not None and isinstance(event, ProcessRecord | CheckpointWritten):
            progress(event.step)
        if isinstance(event, CheckpointWritten) and event.step in expected:
            theirs = expected[event.step]  # the event's fields are named as the record's
            if any(getattr(event, key) != theirs.get(key) for key in CHAINS):
                break  # closing the generator releases the run's lock and its actors
    return scratch


def compare_prefix(reference_run: Path, rerun: Path, until: int, after: int = -1) -> dict:
    """The reference's checkpoint and process records up to `until` against the rerun's:
    the earliest that differs (process records are finer: every log_every steps), and how
    many were computed here (after `after`, the step of the resume point it started from,
    whose logs hold the records before it)."""
    compared, firsts = 0, []
    for name, read in ((LOGS[0], workspace.read_hashes), (LOGS[1], workspace.read_process)):
        ours = {line["step"]: line for line in read(rerun)}
        for theirs in read(reference_run):
            if theirs["step"] > until:
                break
            mine = ours.get(theirs["step"])
            compared += theirs["step"] > after
            differing = _differing_fields(mine, theirs)
            if differing:
                firsts.append({"file": name, "step": theirs["step"], "fields": differing})
                break
    first = min(firsts, key=lambda found: found["step"], default=None)  # a tie: the checkpoint
    return {"identical": first is None, "records_compared": compared, "first": first}


def _differing_fields(ours: dict | None, theirs: dict) -> list[str]:
    """The fields of a record that differ, compared by value (a loss, an epsilon, the
    scores, not only the chains), all but the timings; every field when ours is missing."""
    others = sorted((set(theirs) | set(ours or {})) - set(TIMINGS) - set(CHAINS) - {"step"})
    keys = [k for k in CHAINS if k in theirs or k in (ours or {})] + others
    if ours is None:
        return [k for k in keys if k in CHAINS] or keys
    return [k for k in keys if _json_value(ours.get(k)) != _json_value(theirs.get(k))]


def _json_value(value):
    """1 and 1.0 are equal to Python; in a record they are not the same value."""
    return (type(value).__name__, value) if isinstance(value, int | float) else value


def make_resume_point(
    config: RunConfig, run_dir: Path, scratch: Path, out: Path, step: int, progress=None
) -> dict:
    """Retrain a finished run to `step`, check it passed through the run's own chain, and
    keep the resume point there for a bundle to ship."""
    train_until(config, scratch, step, progress=progress, reference_run=run_dir)
    check = compare_prefix(run_dir, scratch, step)
    if not check["identical"]:
        first = check["first"]
        raise InputError(
            f"{run_dir}: retraining to step {step} leaves its chain at step "
            f"{first['step']} ({', '.join(first['fields'])}); this machine does "
            "not replicate the run, so its resume point would not be the run's"
        )
    staging = out.with_name(f".{out.name}.partial")  # never a half-copied point in `out`
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(workspace.resume_dir(scratch), staging)
    (staging / SHIPPED_LOGS).mkdir()
    for name in LOGS:  # at step 0 no process record is written yet: an empty log, then
        log = scratch / name
        (staging / SHIPPED_LOGS / name).write_bytes(log.read_bytes() if log.exists() else b"")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return check


def replay_evaluation(
    reference: Path, config: RunConfig, evaluation, rerun: Path, until: int, episodes: int
) -> dict | None:
    """The first and the last checkpoint retrained here (to `until`) that the reference
    evaluated, each played again on its first `episodes` episodes, row by row against the
    reference's eval.csv (the first: step 0's scores are the report's too, and a forged
    one there was missed); None where the reference evaluated none of them (or `episodes`
    is 0)."""
    eval_dir = workspace.eval_dir(reference / workspace.EVALUATIONS, config.group, config.run)
    if episodes <= 0 or not (eval_dir / workspace.EVAL_CSV).exists():
        return None
    shipped: dict[int, list[dict]] = {}
    for row in workspace.read_eval(eval_dir):
        shipped.setdefault(int(row["step"]), []).append(row)
    retrained = [h for h in workspace.read_hashes(rerun) if h["step"] <= until]
    lines = [h for h in retrained if h["step"] in shipped]
    if not lines:
        return None
    played = {"steps": [], "episodes": 0, "first": None, "step": lines[-1]["step"]}
    for line in {line["step"]: line for line in (lines[0], lines[-1])}.values():
        path = workspace.checkpoint_path(rerun, line["step"])
        theirs = {int(row["episode"]): row for row in shipped[line["step"]]}
        count, first = replay_rows(
            reference, config, evaluation, path, line["weights_sha256"], theirs, episodes
        )
        played["steps"].append((line["step"], count))
        played["episodes"] += count
        if first is not None:
            played.update(step=line["step"], first=first)
            break
    return played


def replay_rows(
    reference: Path,
    config: RunConfig,
    evaluation,
    checkpoint: Path,
    weights_sha256: str,
    rows: dict[int, dict],
    limit: int | None = None,
) -> tuple[int, dict | None]:
    """The checkpoint played on the episodes of `rows` (eval.csv's rows by episode; with
    `limit`, on the protocol's first `limit` episodes instead), in one batch as the
    evaluation stage plays them: how many were played, and the first whose result is not
    its row (None: all are)."""
    from dataclasses import asdict

    from reprodqn.evaluation.protocol import Evaluator
    from reprodqn.evaluation.stage import protocol_episodes
    from reprodqn.evaluation.start_states import for_game

    # the bundle's (a game's own start_sequences/GAME.json included), else the package's
    named = reference / for_game(evaluation, config.env.game, reference)
    protocol, specs, sequences, _, _ = protocol_episodes(
        config, evaluation, named if named.exists() else None
    )
    chosen = specs[:limit] if limit is not None else [s for s in specs if s.episode in rows]
    with Evaluator(
        protocol, sequences, 1, config.compute.device, config.compute.deterministic_gpu
    ) as evaluator:
        results = next(evaluator.evaluate_many([(checkpoint, weights_sha256)], chosen))
    for result in results:
        ours = {k: "" if v is None else str(v) for k, v in asdict(result).items()}
        row = rows.get(result.episode, {})
        differing = [k for k in ours if k != "episode" and row.get(k) != ours[k]]
        if differing:
            return len(results), {
                "episode": result.episode,
                "fields": differing,
                "ours": {k: ours[k] for k in differing},
                "theirs": {k: row.get(k) for k in differing},
            }
    return len(results), None


def replayed(played: dict | None) -> str:
    """The identical verdict's note on the evaluation replayed (none: nothing)."""
    if played is None:
        return " (no evaluation replayed: the reference evaluated none of its checkpoints)"
    each = played.get("steps") or [(played["step"], played["episodes"])]
    steps = " and ".join(f"{count} of step {step:,}" for step, count in each)
    return f", and evaluation episodes replayed ({steps}) give eval.csv's rows"


def replay_difference(run: str, played: dict) -> str:
    """The verdict when the weights are the reference's but their evaluation is not."""
    first = played["first"]
    values = "; ".join(
        f"{k} ours {first['ours'][k]}, reference {first['theirs'][k]}" for k in first["fields"]
    )
    return (
        f"verify: DIFFERENT: {run} retrained here has the reference's weights and losses, "
        f"but its checkpoint at step {played['step']} plays episode {first['episode']} "
        f"otherwise than the reference's eval.csv ({values})"
    )
