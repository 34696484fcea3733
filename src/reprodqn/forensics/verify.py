"""Verify a workspace against another copy of the study (a colleague's workspace or an
unpacked bundle): the first diverging chain, and the conditions that differ."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.report.analysis import differs_by_design, divergence, isa_setting
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
                f"{reference}: {len(bad)} files do not match the bundle's "
                f"{MANIFEST} (first: {bad[0]})"
            )


NOT_TRAINED = "not trained here"  # the "chain" of a run the reference has and ours lacks


def verify(ours: Path, reference: Path, study) -> dict:
    """Compare every run's chains and evaluation results with the reference copy's
    (`study`: params.study, which groups and runs there are)."""

    reference, ours = Path(reference), Path(ours)
    check_bundle(reference)
    if not ours.is_dir():
        raise InputError(f"{ours}: not a directory (expected the workspace to check, --root)")
    mine = load_study(ours, study)
    if not any(run.hashes for runs in mine.values() for run in runs):
        raise InputError(
            f"{ours}: no trained runs to check (expected runs/<group>/<run>/"
            "hashes.jsonl: run the study there first, or give --root)"
        )
    theirs = load_study(reference, study)
    first = None
    compared = 0
    by_design = []  # runs whose chains differ, as designed: not a replication failure
    for group in mine:
        for a, b in zip(mine[group], theirs[group], strict=True):
            if not a.hashes and not b.hashes:
                continue
            chain: str | None
            step: int | None
            if not a.hashes:  # a study still running here: say so, not "differs at step 0"
                chain, step = NOT_TRAINED, 0
            else:
                steps = divergence(b, a)
                chain = next((name for name, step in steps.items() if step is not None), None)
                step = steps[chain] if chain is not None else None
                if chain is not None and (differs_by_design(a) or differs_by_design(b)):
                    by_design.append(f"{group}/{a.run}")
                    continue
            compared += 1
            if chain is not None and first is None:
                first = {"group": group, "run": a.run, "step": step, "chain": chain}
    if compared == 0:
        raise InputError(
            f"{reference}: no runs to compare (expected runs/<group>/<run>/hashes.jsonl)"
        )
    conditions = {}
    for side, root in (("ours", ours), ("reference", reference)):
        path = workspace.conditions_path(root)
        conditions[side] = read_json(path, "conditions record") if path.exists() else None
    return {
        "identical": first is None,
        "runs_compared": compared,
        "first_divergence": first,
        "differ_by_design": by_design,
        **conditions_differing(conditions["ours"], conditions["reference"]),
    }


def conditions_differing(ours: dict | None, theirs: dict | None) -> dict:
    """Which conditions differ (those that change numbers apart), and each side's ISA."""
    from reprodqn.determinism.provenance import differences, fingerprint_fields

    found: dict = {
        "conditions_differing": [],
        "numeric_conditions_differing": [],
        "cpu_isa": {"ours": isa_setting(ours), "reference": isa_setting(theirs)},
    }
    if ours is not None and theirs is not None:
        found["conditions_differing"] = differences(ours, theirs)
        found["numeric_conditions_differing"] = differences(
            fingerprint_fields(ours), fingerprint_fields(theirs)
        )
    return found


def summary(result: dict) -> str:
    """What verify prints: the verdict, where it first diverges, what conditions differ."""
    if result["identical"]:
        lines = [
            f"verify: identical: {result['runs_compared']} runs, every weight and loss "
            "chain and every evaluation result"
        ]
    else:
        d = result["first_divergence"]
        where = (
            f"{d['group']}/{d['run']} is not trained here (the reference has it)"
            if d["chain"] == NOT_TRAINED
            else f"first divergence in {d['group']}/{d['run']} at checkpoint step "
            f"{d['step']} ({d['chain']})"
        )
        lines = [
            f"verify: DIFFERENT: {where}",
            f"CPU instruction set: ours {result['cpu_isa']['ours']}; reference "
            f"{result['cpu_isa']['reference']}",
        ]
    if result.get("differ_by_design"):
        lines.append(
            f"different by design, not counted: {', '.join(result['differ_by_design'])}"
            " (compute.cpu_reduction_order: random, the gpu group's emulation of "
            "nondeterministic GPU kernels)"
        )
    if result["numeric_conditions_differing"]:
        lines.append(
            "conditions that change numbers and differ: "
            + ", ".join(result["numeric_conditions_differing"])
        )
    if result["conditions_differing"]:
        lines.append("all conditions that differ: " + ", ".join(result["conditions_differing"]))
    return "\n".join(lines)


def spot_check(reference: Path, config, until: int, scratch: Path) -> dict:
    """Retrain one shipped run (its config from `rerun.shipped_config`) up to `until` here,
    from the resume point the reference ships for it if any, and compare the prefix of its
    chains with the shipped ones."""
    from reprodqn.core.progress import RunProgress
    from reprodqn.forensics import rerun

    reference, group, run = Path(reference), config.group, config.run
    if until > config.train.steps:
        raise InputError(f"--until {until}: the run has only {config.train.steps} steps")
    reference_run = workspace.run_dir(reference / workspace.RUNS, group, run)
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
    result = rerun.compare_prefix(reference_run, Path(scratch), until)
    ours = read_json(Path(scratch) / workspace.CONDITIONS, "conditions record")
    theirs_path = reference_run / workspace.CONDITIONS
    theirs = read_json(theirs_path, "conditions record") if theirs_path.exists() else ours
    result.update(
        run=f"{group}/{run}", until=until, from_step=start, **conditions_differing(ours, theirs)
    )
    return result


def spot_check_summary(result: dict) -> str:
    """What verify --rerun prints."""
    origin = (
        f"from the shipped resume point at step {result['from_step']}"
        if result["from_step"]
        else "from scratch"
    )
    if result["identical"]:
        lines = [
            f"verify: identical: {result['run']} retrained {origin} to step "
            f"{result['until']}; {result['records_compared']} checkpoint and process "
            "records match the reference's"
        ]
    else:
        first = result["first"]
        lines = [
            f"verify: DIFFERENT: {result['run']} retrained {origin} leaves the "
            f"reference at step {first['step']} ({first['file']}: "
            f"{', '.join(first['fields'])})",
            f"CPU instruction set: ours {result['cpu_isa']['ours']}; reference "
            f"{result['cpu_isa']['reference']}",
            "next: `reprodqn trace` on both machines from a resume point before that "
            "step, then `reprodqn trace-diff`, names the first differing op",
        ]
    if result.get("differ_by_design"):
        lines.append(
            f"different by design, not counted: {', '.join(result['differ_by_design'])}"
            " (compute.cpu_reduction_order: random, the gpu group's emulation of "
            "nondeterministic GPU kernels)"
        )
    if result["numeric_conditions_differing"]:
        lines.append(
            "conditions that change numbers and differ: "
            + ", ".join(result["numeric_conditions_differing"])
        )
    return "\n".join(lines)
