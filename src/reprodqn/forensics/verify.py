"""Verify a workspace against another copy of the study (a colleague's workspace or an
unpacked bundle): the first diverging chain, and the conditions that differ."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.determinism.replication_scope import recorded_conditions, where_it_replicates
from reprodqn.forensics import chains, checkpoint_files
from reprodqn.report.analysis import (
    RunResult,
    differs_by_design,
    first_loss_divergence,
    isa_setting,
)
from reprodqn.report.study_records import load_study


def check_bundle(reference: Path) -> None:
    """An unpacked bundle must match its manifest before anything is compared with it."""
    from reprodqn.report.bundle import MANIFEST, check_manifest

    if not reference.is_dir():
        raise InputError(
            f"{reference}: not a directory (expected a workspace or an unpacked bundle)"
        )
    if (reference / MANIFEST).exists():
        bad = check_manifest(reference)
        if bad:
            raise InputError(
                f"{reference}: {chains.plural(len(bad), 'file')} not as the bundle's "
                f"{MANIFEST} lists (first: {bad[0]})"
            )
    elif workspace.is_unpacked_bundle(reference):  # a bundle, without its manifest
        raise InputError(
            f"{reference}: a bundle without its {MANIFEST}, so its files cannot be checked "
            "(unpack the archive again)"
        )


NOT_TRAINED = "not trained here"  # the "chain" of a run the reference has and ours lacks
NOT_IN_REFERENCE = "not trained in the reference"  # and of a run ours has and it lacks
SCORES_ONLY = "scores differ, chains identical"  # an evaluation that is not what they play
PREFIX = "identical as far as both go"  # one side's chain goes on past the other's
SETTINGS_FIRST = (
    "next: the settings below differ, among them some that change numbers, which alone "
    "part chains; train with the reference's (its params.yaml) before looking for the op"
)
NEXT = (
    "next: `reprodqn trace` on both machines from a resume point before that step, then "
    "`reprodqn trace-diff`, names the first differing op"
)

EDITED = (
    "the reference's record gives values its own loss chain does not (the chain, identical "
    "here, covers every loss): it was edited after training, not computed otherwise; "
    "there is no op to trace"
)


def verify(ours: Path, reference: Path, study) -> dict:
    """Compare every run's chains and evaluation results with the reference copy's
    (`study`: params.study, which groups and runs there are)."""

    reference, ours = Path(reference), Path(ours)
    check_bundle(reference)
    if not ours.is_dir():
        raise InputError(f"{ours}: not a directory (expected the workspace to check, --root)")
    chains.refuse_itself(ours, reference)
    mine = _trained(ours, study, "no trained runs to check", "run the study there first")
    theirs = _trained(reference, study, "no trained runs of this study", "a workspace or bundle")
    checkpoints = checkpoint_files.check_study((ours, reference), study)  # files, not only chains
    first, compared, evaluated = None, 0, 0
    described: tuple[str, int] | None = None
    by_design = []  # runs whose chains differ, as designed: not a replication failure
    prefixes = []  # runs whose chain on one side is the start of the other side's
    tally = dict.fromkeys(
        ("identical", PREFIX, "parted", SCORES_ONLY, NOT_TRAINED, NOT_IN_REFERENCE), 0
    )
    for group in mine:
        for a, b in zip(mine[group], theirs[group], strict=True):
            if not a.hashes and not b.hashes:
                continue
            found = pair_difference(a, b)
            if found is not None and differs_by_design(a) and differs_by_design(b):
                by_design.append(f"{group}/{a.run}")
                continue
            compared += 1
            shorter = found is not None and chains.is_prefix(found)
            if found is not None and shorter:
                prefixes.append(chains.prefix(f"{group}/{a.run}", found, a.hashes, b.hashes))
                found = None  # identical as far as both go: a verdict of its own
            if found is not None and found["chain"] == "evaluation":
                if chains.first_difference(a.hashes, b.hashes) is None:
                    found["chain"] = SCORES_ONLY  # the same weights, other scores
            verdict = PREFIX if shorter else "identical" if found is None else found["chain"]
            tally[verdict if verdict in tally else "parted"] += 1
            evaluated += len(set(a.scores) & set(b.scores))
            if described is None or (found is not None and first is None):
                described = (group, a.run)
            if found is not None and first is None:
                first = {"group": group, "run": a.run, **found}
    if compared == 0:
        raise InputError(
            f"{reference}: every run trained on both sides differs by design "
            f"({', '.join(by_design)}): nothing there can be compared bit for bit"
        )
    return {
        "identical": first is None and not prefixes,
        "prefix": prefixes if first is None else [],
        "runs_compared": compared,
        "checkpoints_evaluated_on_both": evaluated,
        "checkpoint_files_checked": checkpoints,
        "first_divergence": first,
        "differ_by_design": by_design,
        "tally": tally,
        "reference_replicates": _replicates(reference),
        **_described(ours, reference, *described),  # type: ignore[misc]  # compared > 0
    }


def _replicates(reference: Path) -> str:
    """Where the reference's results replicate, from the conditions its runs recorded."""
    return where_it_replicates(recorded_conditions(reference), "The reference's results")


def _trained(root: Path, study, nothing: str, expected: str) -> dict:
    runs = load_study(root, study)
    if not any(run.hashes for group in runs.values() for run in group):
        raise InputError(
            f"{root}: {nothing} (expected runs/<group>/<run>/hashes.jsonl: {expected}, "
            "or give --root)"
        )
    return runs


def pair_difference(ours: RunResult, theirs: RunResult) -> dict | None:
    """Where one run leaves the reference's copy: the first checkpoint whose chains differ
    (or where one chain stops), sharpened by process.jsonl where the loss chains part, or
    the first checkpoint both evaluated whose scores differ; None when it never does."""
    if not ours.hashes or not theirs.hashes:
        return {"step": 0, "chain": NOT_TRAINED if not ours.hashes else NOT_IN_REFERENCE}
    found = chains.first_difference(ours.hashes, theirs.hashes)
    both = sorted(set(ours.scores) & set(theirs.scores))
    scores = next((s for s in both if ours.scores[s] != theirs.scores[s]), None)
    if scores is not None and (found is None or scores < (found["step"] or 0)):
        return {"step": scores, "chain": "evaluation"}
    if found is None:
        return None
    fields = found.pop("fields")
    divergence = {"step": found.pop("step"), "chain": ", ".join(fields), **found}
    loss = first_loss_divergence(theirs, ours) if "losses" in fields else None
    if loss is not None and loss["updates"] is not None and loss["step"] < divergence["step"]:
        divergence["process"] = loss
    return divergence


def _described(ours: Path, reference: Path, group: str, run: int) -> dict:
    """The conditions and settings of one pair of runs, the first that parts (or the first
    compared): the runs' own records where both have one, else the workspaces'."""
    pair = [workspace.run_dir(root / workspace.RUNS, group, run) for root in (ours, reference)]
    paths = [run_dir / workspace.CONDITIONS for run_dir in pair]
    if not all(path.exists() for path in paths):
        paths = [workspace.conditions_path(root) for root in (ours, reference)]
    conditions = [read_json(path, "conditions record") if path.exists() else None for path in paths]
    configs = [run_dir / workspace.RUN_CONFIG for run_dir in pair]
    digests = {read_json(path, "run config").get("digest") for path in configs if path.exists()}
    return {
        **conditions_differing(*conditions),
        "config_differing": chains.config_differences(*pair),
        # the digest covers what changes numbers (not the resume or log intervals, say)
        "digests_differ": len(digests) > 1,
    }


def conditions_differing(ours: dict | None, theirs: dict | None) -> dict:
    """Which conditions differ (those that change numbers apart, with both values), and
    each side's ISA."""
    from reprodqn.determinism.provenance import differences, differing_values, fingerprint_fields

    found: dict = {
        "conditions_differing": [],
        "numeric_conditions_differing": [],
        "cpu_isa": {"ours": isa_setting(ours), "reference": isa_setting(theirs)},
    }
    if ours is not None and theirs is not None:
        found["conditions_differing"] = differences(ours, theirs)
        found["numeric_conditions_differing"] = differing_values(
            fingerprint_fields(ours), fingerprint_fields(theirs)
        )
    return found


def summary(result: dict) -> str:
    """What verify prints: the verdict, where it first diverges, what differs besides."""
    if result["identical"]:
        evaluated = result["checkpoints_evaluated_on_both"]
        lines = [
            f"verify: identical: {chains.plural(result['runs_compared'], 'run')}, every "
            "weight and loss chain"
            + (
                f", and the evaluation results of {evaluated} checkpoints both sides evaluated"
                if evaluated
                else " (no checkpoint is evaluated on both sides: scores not compared)"
            )
            + chains.files_checked(result)
        ]
    elif result.get("prefix"):
        lines = [chains.prefix_line(result["prefix"], result["runs_compared"])]
    else:
        first = result["first_divergence"]
        counts = [f"{n} {verdict}" for verdict, n in result.get("tally", {}).items() if n]
        lines = [
            f"verify: DIFFERENT: {_where(first)}",
            f"of {chains.plural(result['runs_compared'], 'run')}: {', '.join(counts)}",
            *_isa_line(result),
        ]
        if result.get("digests_differ"):
            lines.append(SETTINGS_FIRST)
        elif first["chain"] not in (
            *(NOT_TRAINED, NOT_IN_REFERENCE, SCORES_ONLY, "length", "step", "evaluation"),
        ):
            lines.append(NEXT)
    lines += _besides(result, all_conditions=True)
    lines += [result["reference_replicates"]] if "reference_replicates" in result else []
    return "\n".join(lines)


def _where(d: dict) -> str:
    run = f"{d['group']}/{d['run']}"
    if d["chain"] in (NOT_TRAINED, NOT_IN_REFERENCE):
        return f"{run} is {d['chain']} (the other side has it)"
    if d["chain"] == SCORES_ONLY:
        return (
            f"{run} has the same weights and losses on both sides, but its eval.csv scores "
            f"differ at checkpoint step {d['step']} (one side's evaluation is not what these "
            "weights play: evaluated otherwise, or edited)"
        )
    where = chains.where(run, d, d["chain"].split(", "))
    if "process" in d:
        first, last = d["process"]["updates"]
        where += f"; process.jsonl parts at step {d['process']['step']} (updates {first}-{last})"
    return where


def _isa_line(result: dict) -> list[str]:
    """Each side's CPU instruction set, where they differ (none where they match)."""
    isa = result["cpu_isa"]
    if isa["ours"] == isa["reference"]:
        return []
    return [f"CPU instruction set: ours {isa['ours']}; reference {isa['reference']}"]


def _besides(result: dict, all_conditions: bool) -> list[str]:
    """The runs left out by design, and the settings and conditions that differ."""
    lines = []
    if result.get("differ_by_design"):
        lines.append(
            f"different by design, not counted: {', '.join(result['differ_by_design'])}"
            " (compute.cpu_reduction_order: random, the gpu group's emulation of "
            "nondeterministic GPU kernels)"
        )
    lines += chains.differing_lines(result)
    if all_conditions and result["conditions_differing"]:
        lines.append("all conditions that differ: " + ", ".join(result["conditions_differing"]))
    return lines


def spot_check(
    reference: Path, config, until: int, scratch: Path, evaluation=None, episodes: int = 0
) -> dict:
    """Retrain one shipped run (its config from `rerun.shipped_config`) up to `until` here,
    from the resume point the reference ships for it if any, and compare the prefix of its
    chains and process records with the shipped ones; with `evaluation` (params'), replay
    `episodes` episodes of its first and last retrained checkpoints against the shipped
    eval.csv. One at a time per `scratch`: a second --rerun there deleted the first's run
    while it trained, and both said DIFFERENT; it is refused, naming the first."""
    from reprodqn.core import run_lock

    scratch = Path(scratch)
    with run_lock.hold(
        scratch.with_name(f".{scratch.name}.lock"), f"verify --rerun {config.group}/{config.run}"
    ):
        return _spot_check(reference, config, until, scratch, evaluation, episodes)


def _spot_check(
    reference: Path, config, until: int, scratch: Path, evaluation, episodes: int
) -> dict:
    from reprodqn.core.progress import RunProgress
    from reprodqn.determinism import numerics
    from reprodqn.forensics import rerun

    reference, group, run = Path(reference), config.group, config.run
    on_cuda = numerics.resolve_device(config.compute.device).type == "cuda"
    if (
        (not config.compute.deterministic_gpu)
        if on_cuda
        else (config.compute.cpu_reduction_order == "random")
    ):
        raise InputError(
            f"--rerun {group}/{run}: differs by design here (nondeterministic GPU kernels, "
            "or on a CPU their emulation: compute.cpu_reduction_order random), so no two "
            "trainings give its chain; rerun a run of another group"
        )
    if until > config.train.steps:
        raise InputError(f"--until {until}: the run has only {config.train.steps} steps")
    reference_run = workspace.run_dir(reference / workspace.RUNS, group, run)
    checkpoint_files.check_run(reference_run)  # what the reference ships, against its chain
    resume_dir = rerun.shipped_resume_point(reference, group, run, until)
    start = (0 if resume_dir is None else workspace.latest_resume_step(resume_dir)) or 0
    # two phases, as a training run: a rate measured while the replay fills promises an early end
    progress = RunProgress(
        f"verify --rerun {group}/{run}", until, start, config.replay.learning_starts
    )
    rerun.train_until(
        config,
        Path(scratch),
        until,
        resume_dir,
        progress=progress.update,
        reference_run=reference_run,
    )
    result = rerun.compare_prefix(reference_run, Path(scratch), until, after=start or -1)
    if evaluation is not None and result["identical"]:  # the weights are the reference's
        played = rerun.replay_evaluation(reference, config, evaluation, scratch, until, episodes)
        result.update(evaluation=played, identical=played is None or played["first"] is None)
    ours = read_json(Path(scratch) / workspace.CONDITIONS, "conditions record")
    theirs_path = reference_run / workspace.CONDITIONS
    theirs = read_json(theirs_path, "conditions record") if theirs_path.exists() else ours
    result.update(
        run=f"{group}/{run}",
        until=until,
        from_step=start,
        run_replicates=where_it_replicates([theirs], "This run's results"),
        **conditions_differing(ours, theirs),
    )
    return result


def spot_check_summary(result: dict) -> str:
    """What verify --rerun prints."""
    from reprodqn.forensics import rerun

    origin = (
        f"from the shipped resume point at step {result['from_step']}"
        if result["from_step"]
        else "from scratch"
    )
    played = result.get("evaluation")
    if result["identical"]:
        lines = [
            f"verify: identical: {result['run']} retrained {origin} to step "
            f"{result['until']}; the {chains.plural(result['records_compared'], 'record')} "
            "it computed (checkpoints and process logs, by value) match the reference's"
            + rerun.replayed(played)
        ]
    elif result.get("first") is None and played is not None:
        lines = [rerun.replay_difference(result["run"], played)]
    else:
        first = result["first"]
        edited = first["file"] == workspace.PROCESS and not set(first["fields"]) & set(
            workspace.CHAINS.values()
        )  # its loss chain, which covers every loss, is the rerun's: the record was edited
        lines = [
            f"verify: DIFFERENT: {result['run']} retrained {origin} leaves the "
            f"reference at step {first['step']} ({first['file']}: "
            f"{', '.join(first['fields'])})",
            *_isa_line(result),
            EDITED if edited else NEXT,
        ]
    lines += _besides(result, all_conditions=False)
    return "\n".join(lines + ([result["run_replicates"]] if "run_replicates" in result else []))
