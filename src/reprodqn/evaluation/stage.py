"""The evaluate stage: every checkpoint of a run played by the protocol's workers into
eval.csv, resumable per checkpoint, and skipped when eval.csv already holds the same
evaluation (protocol, start states and checkpoints: the evaluation digest)."""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from reprodqn.config.params import RunConfig
from reprodqn.core import packaged, workspace
from reprodqn.core.digests import json_digest
from reprodqn.core.progress import Progress
from reprodqn.core.workers import default_workers
from reprodqn.evaluation.protocol import (
    EVAL_THREADS,
    EpisodeResult,
    Evaluator,
    Protocol,
    episode_specs,
)


@dataclass(frozen=True)
class CheckpointEvaluated:
    index: int
    total: int
    step: int
    mean_score: float
    agent_steps: int
    resumed: bool = False


def evaluation_digest(
    protocol: Protocol, specs, sequences_sha256: str | None, hashes: list[dict]
) -> str:

    body = {
        "protocol": asdict(protocol),
        "specs": [s.record() for s in specs],
        "start_sequences": sequences_sha256,
        "checkpoints": [[h["step"], h["weights_sha256"]] for h in hashes],
        "inference_threads": EVAL_THREADS,
    }
    return json_digest(body)


def _checkpoints_done(progress_path: Path, digest: str) -> dict[int, list[dict]]:
    """The checkpoints an interrupted evaluation with this digest finished, by step; the
    progress file is rewritten to hold only them."""
    done: dict[int, list[dict]] = {}
    if progress_path.exists():
        for line in progress_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything before it stands
            if entry.get("digest") == digest:
                done[entry["step"]] = entry["results"]
        progress_path.write_text(
            "".join(
                json.dumps({"digest": digest, "step": s, "results": r}) + "\n"
                for s, r in done.items()
            )
        )
    return done


def _csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, workspace.EVAL_CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def evaluate_run(
    run_dir: Path,
    out_dir: Path,
    hashes: list[dict],
    evaluator: Evaluator,
    specs,
    digest: str,
    start_states: dict | None = None,
    policies: dict[int, Path] | None = None,
) -> Iterator[CheckpointEvaluated]:
    """Evaluate every checkpoint of `run_dir` (or the policy file `policies` names for a
    step) into `out_dir`/eval.csv (a directory of its own: DVC lets no stage write inside
    another's outputs); progress survives interruption per checkpoint."""
    from reprodqn.core.atomic import append_line, write_json, write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    progress_path = out_dir / workspace.EVAL_PROGRESS
    done = _checkpoints_done(progress_path, digest)
    policies = policies or {}
    todo = [
        (
            policies.get(h["step"]) or workspace.checkpoint_path(run_dir, h["step"]),
            h["weights_sha256"],
        )
        for h in hashes
        if h["step"] not in done
    ]
    fresh = evaluator.evaluate_many(todo, specs)
    rows = []
    for index, record in enumerate(hashes):
        step = record["step"]
        resumed = step in done
        if resumed:
            results = [EpisodeResult(**r) for r in done[step]]
        else:
            results = next(fresh)
            append_line(
                progress_path,
                json.dumps(
                    {"digest": digest, "step": step, "results": [asdict(r) for r in results]}
                ),
            )
        rows += [{"step": step, **asdict(r)} for r in results]
        yield CheckpointEvaluated(
            index + 1,
            len(hashes),
            step,
            float(np.mean([r.score for r in results])),
            sum(r.frames for r in results) // evaluator.protocol.frame_skip,
            resumed,
        )

    write_text(out_dir / workspace.EVAL_CSV, _csv_text(rows))
    write_json(
        out_dir / workspace.EVAL_JSON, _evaluation_record(evaluator, specs, digest, start_states)
    )
    progress_path.unlink(missing_ok=True)


def _evaluation_record(evaluator: Evaluator, specs, digest: str, start_states: dict | None) -> dict:
    """eval.json: how the evaluation was run, beside the scores in eval.csv."""
    return {
        "digest": digest,
        "protocol": asdict(evaluator.protocol),
        "episodes": len(specs),
        "inference_threads": EVAL_THREADS,
        "workers": evaluator.workers,
        "device": evaluator.device,
        "start_states": start_states,
    }


# ---------------------------------------------------------------------------------------------
# The stage for one run


@dataclass(frozen=True)
class EvaluatedRun:
    """What the evaluate stage did for one run, for the probe and tracking that follow."""

    config: RunConfig
    run_dir: Path
    out_dir: Path
    hashes: list
    digest: str
    protocol: Protocol


def protocol_episodes(config, evaluation, start_sequences: Path | None):
    """The protocol for a config's game and the evaluation params, its episodes, and their
    start sequences (none for sticky agents): (protocol, specs, sequences, their SHA-256,
    the start states' summary for the record)."""
    from reprodqn.evaluation import start_states

    protocol = Protocol.for_run(config, evaluation)
    chosen = str(start_sequences or start_states.for_game(evaluation, config.env.game))
    if protocol.sticky_p == 0 and chosen == start_states.NONE:
        specs = episode_specs(
            protocol, evaluation.episodes, evaluation.sticky_seed_start, config.env.noop_max
        )
        return protocol, specs, None, None, start_states.no_start_states(config.env.noop_max)
    specs = episode_specs(protocol, evaluation.episodes, evaluation.sticky_seed_start)
    if protocol.sticky_p > 0:
        return protocol, specs, None, None, None
    path = packaged.start_sequences(chosen)
    doc = start_states.load(path, at_least=evaluation.episodes)
    start_states.check_game(doc, path, config.env.game)
    return (
        protocol,
        specs,
        doc["sequences"],
        doc["sequences_sha256"],
        start_states.summary(doc, path),
    )


def evaluate_stage(
    params,
    group: str,
    run: int,
    runs: Path,
    evaluations: Path,
    start_sequences: Path | None,
    workers: int | None,
) -> EvaluatedRun:
    """Evaluate every checkpoint of runs/GROUP/RUN, unless eval.csv already holds this
    evaluation (same protocol, start states and checkpoints)."""
    from reprodqn.config.params import resolve_run
    from reprodqn.core.atomic import read_json
    from reprodqn.core.errors import InputError
    from reprodqn.evaluation.start_states import score_note
    from reprodqn.training.run_game import check_run_game
    from reprodqn.training.run_numerics import keep_recorded_numerics

    run_dir = workspace.run_dir(runs, group, run)
    # its checkpoints compute in the mode they were trained in, whatever the params say
    config, kept = keep_recorded_numerics(resolve_run(params, group, run), run_dir, False)
    if not (run_dir / workspace.COMPLETE).exists():
        raise InputError(
            f"{run_dir}: training is not complete; run `reprodqn train "
            f"--group {group} --run {run}` first"
        )
    check_run_game(run_dir, config.env.game)
    hashes = workspace.read_hashes(run_dir)
    protocol, specs, sequences, sequences_sha, used = protocol_episodes(
        config, params.evaluation, start_sequences
    )
    digest = evaluation_digest(protocol, specs, sequences_sha, hashes)
    label = f"evaluate {group}/{run}"
    if kept:
        print(f"{label}: {kept}", file=sys.stderr)
    out_dir = workspace.eval_dir(evaluations, group, run)
    record = out_dir / workspace.EVAL_JSON
    if (
        (out_dir / workspace.EVAL_CSV).exists()
        and record.exists()
        and read_json(record, "evaluation record").get("digest") == digest
    ):
        print(f"{label}: already evaluated{score_note(used)}", file=sys.stderr)
    else:
        evaluator = Evaluator(
            protocol,
            sequences,
            workers or default_workers(threads=1),
            config.compute.device,
            config.compute.deterministic_gpu,
        )
        with evaluator:
            _evaluate_with_progress(label, run_dir, out_dir, hashes, evaluator, specs, digest, used)
    return EvaluatedRun(config, run_dir, out_dir, hashes, digest, protocol)


def _evaluate_with_progress(
    label, run_dir, out_dir, hashes, evaluator, specs, digest, used
) -> None:
    from reprodqn.evaluation.start_states import mean_score

    progress = Progress(label, len(hashes), unit="checkpoints", interval=0)
    agent_steps = 0
    start = time.monotonic()
    for event in evaluate_run(run_dir, out_dir, hashes, evaluator, specs, digest, used):
        agent_steps += event.agent_steps
        rate = agent_steps / max(time.monotonic() - start, 1e-9)
        note = (
            "kept from an interrupted evaluation" if event.resumed else f"{rate:.0f} agent steps/s"
        )
        score = mean_score(event.mean_score, used)
        progress.update(event.index, extra=f"step {event.step}: {score} ({note})")
