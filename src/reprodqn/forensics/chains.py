"""Any two result folders compared by their hash chains (`reprodqn verify A B`): every
folder under each that holds a hashes.jsonl is a run, matched with the other side's by its
path; the first checkpoint where a pair parts, and the conditions that differ.

A run written by reprodqn.exact's HashChain has this layout whatever trained it, so this
checks a PPO script's replication as it checks reprodqn's own runs."""

from __future__ import annotations

import os
from itertools import zip_longest
from pathlib import Path

from reprodqn.config.compute import SPEED_OPTIONS
from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.determinism.provenance import differing_values, fingerprint_fields
from reprodqn.determinism.replication_scope import folder_conditions, where_it_replicates
from reprodqn.forensics import uncompared
from reprodqn.forensics.checkpoint_files import check_runs

CHAIN_FIELDS = {key: name for name, key in workspace.CHAINS.items()} | {
    "updates": "updates",
    "results_sha256": "result logs",  # a script's JsonLogs declared as results (HashChain)
}
# verify's exit codes: 0 identical, 1 DIFFERENT, 2 bad input, 3 a machine error, and this:
# every pair identical as far as both go, one side's chain going on past the other's
PREFIX_EXIT = 4
# settings a run's digest leaves out (how it is computed or saved, never what it computes):
# two runs that differ only there have one digest and one chain, so they are not listed
OUTSIDE_DIGEST = {"compute": SPEED_OPTIONS, "train": ("resume_every",)}


NOT_RUNS = {  # folders whose hashes.jsonl is a copy or a rerun of a run's, not a run
    workspace.RESUME,
    workspace.CHECKPOINTS,
    str(workspace.RESUME_POINTS),
    str(workspace.SCRATCH),
}


def runs(root: Path) -> dict[str, Path]:
    """Every folder under `root` (itself included) that holds a hashes.jsonl, by its path
    relative to `root` ("." for the root); resume points, checkpoints and a workspace's
    scratch (build/: traces and reruns) are not searched."""
    if not root.is_dir():
        raise InputError(f"{root}: not a directory (expected a result folder)")
    found = {}
    for parent, children, files in os.walk(root):
        children[:] = sorted(set(children) - NOT_RUNS)
        if workspace.HASHES in files:
            found[Path(parent).relative_to(root).as_posix()] = Path(parent)
    return found


def numerics_of(lines: list[dict]) -> str:
    """The numerics a chain was computed in: its lines' mark (universal and the spec's
    version), or standard, which writes none."""
    first = lines[0] if lines else {}
    mode = first.get("numerics", "standard")
    return mode if mode == "standard" else f"{mode} (spec {first.get('numerics_spec')})"


def first_difference(ours: list[dict], theirs: list[dict]) -> dict | None:
    """The first checkpoint where two chains part (which records differ there), or where
    one stops and the other goes on; None when they are the same. Chains of different
    numerics are refused: they compute other operations, never the same chain."""
    mine, reference = numerics_of(ours), numerics_of(theirs)
    if ours and theirs and mine != reference:
        raise InputError(
            f"the chains were computed in different numerics (ours {mine}, reference "
            f"{reference}): never alike; train with the reference's compute.numerics"
        )
    last_shared = None
    for a, b in zip_longest(ours, theirs):
        if a is None or b is None:
            present = a or b
            return {
                "step": present.get("step"),
                "fields": ["length"],
                "ours": a is not None,
                "last_shared": last_shared,
            }
        if a.get("step") != b.get("step"):
            return {"step": min(a.get("step", 0), b.get("step", 0)), "fields": ["step"]}
        fields = [name for key, name in CHAIN_FIELDS.items() if a.get(key) != b.get(key)]
        if fields:
            return {"step": a["step"], "fields": fields}
        last_shared = a.get("step")
    return None


def compare(ours: str | Path, reference: str | Path, until: int | None = None) -> dict:
    """Every run the two folders share, compared checkpoint by checkpoint (through step
    `until` where given); a pair where one chain is the start of the other is a prefix,
    its own verdict, not a divergence."""
    ours, reference = Path(ours), Path(reference)
    refuse_itself(ours, reference)
    mine, theirs = runs(ours), runs(reference)
    if not mine or not theirs:
        empty = ours if not mine else reference
        raise InputError(f"{empty}: no hashes.jsonl under it (expected a run's result folder)")
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        raise InputError(
            f"{ours} and {reference} share no run (runs: {', '.join(sorted(mine))} "
            f"against {', '.join(sorted(theirs))})"
        )
    first, prefixes, last_steps, declared = None, [], [], False
    checked = check_runs([*(mine[n] for n in shared), *(theirs[n] for n in shared)])  # files too
    for name in shared:
        a, b = (_through(workspace.read_hashes(side[name]), until) for side in (mine, theirs))
        if until is not None and not a and not b:
            raise InputError(f"--until {until}: {name} has no checkpoint at or before it")
        found = first_difference(a, b)
        declared = declared or any("results_sha256" in line for line in a + b)
        if found is not None and is_prefix(found):
            prefixes.append(prefix(name, found, a, b))
        elif found is not None:
            first = {"run": name, **found}
            break
        if found is not None or a:
            last_steps.append(a[-1]["step"] if found is None else found["last_shared"])
    described = first["run"] if first is not None else shared[0]
    alike = first is None and set(mine) == set(theirs)
    return {
        "identical": alike and not prefixes,
        "prefix": prefixes if alike else [],
        "until": until,
        # with --until, the last checkpoint every pair has on both sides: what was compared
        "through": min(last_steps) if until is not None and last_steps else None,
        "runs_compared": len(shared),
        "checkpoint_files_checked": checked,
        "not_compared": uncompared.pairs(mine, theirs, shared),  # said, not left unsaid
        "results_declared": declared,
        "first_divergence": first,
        "only_ours": sorted(set(mine) - set(theirs)),
        "only_reference": sorted(set(theirs) - set(mine)),
        "numeric_conditions_differing": numeric_conditions_differing(
            mine[described], theirs[described]
        ),
        "config_differing": config_differences(mine[described], theirs[described]),
        "reference_replicates": where_it_replicates(
            folder_conditions(theirs[name] for name in shared), "The reference's results"
        ),
    }


def _through(hashes: list[dict], until: int | None) -> list[dict]:
    return hashes if until is None else [h for h in hashes if h["step"] <= until]


def is_prefix(found: dict) -> bool:
    """first_difference's record of one chain stopping where the other goes on, after at
    least one checkpoint in common."""
    return found.get("fields", [found.get("chain")]) == ["length"] and (
        found.get("last_shared") is not None
    )


def prefix(run: str, found: dict, ours: list[dict], theirs: list[dict]) -> dict:
    """A pair where one chain is the start of the other: the run, the last step both
    have, which side goes on and to which step."""
    longer = ours if found["ours"] else theirs
    return {
        "run": run,
        "through": found["last_shared"],
        "longer": "ours" if found["ours"] else "the reference",
        "to": longer[-1]["step"],
    }


def prefix_line(prefixes: list[dict], runs: int) -> str:
    """verify's verdict where every pair is identical as far as both go."""
    said = [
        f"{'' if p['run'] == '.' else p['run'] + ' '}identical through step {p['through']}; "
        f"{p['longer']} goes on to step {p['to']}"
        for p in prefixes
    ]
    if len(said) == 1 and runs == 1:
        return f"verify: {said[0]}"
    return (
        f"verify: identical as far as both sides go ({plural(runs, 'run')}, "
        f"{len(said)} of them going on further on one side): {' | '.join(said)}"
    )


def exit_code(result: dict) -> int:
    """0 identical, PREFIX_EXIT identical as far as both go, 1 DIFFERENT."""
    return 0 if result["identical"] else PREFIX_EXIT if result.get("prefix") else 1


def refuse_itself(ours: Path, reference: Path) -> None:
    """A folder compared with itself is identical whatever it holds: say so instead."""
    if ours.resolve() == reference.resolve():
        raise InputError(f"{reference}: the same folder as {ours} (compare two copies of it)")


def numeric_conditions_differing(ours: Path, theirs: Path) -> list[str]:
    """The conditions that change numbers and differ between two runs' records, each with
    both values (none where either run has no conditions.json)."""
    records = _both(ours, theirs, workspace.CONDITIONS, "conditions record")
    if records is None:
        return []
    return differing_values(*map(fingerprint_fields, records))


def config_differences(ours: Path, theirs: Path) -> list[str]:
    """The settings two runs were given that differ (their config.json's `config`, key by
    key), each with both values: a changed seed or hyper-parameter named as such."""
    records = _both(ours, theirs, workspace.RUN_CONFIG, "run config")
    if records is None:
        return []
    return differing_values(*(_in_digest(record.get("config") or {}) for record in records))


def _in_digest(config: dict) -> dict:
    """A run's settings less those OUTSIDE_DIGEST."""
    kept = dict(config)
    for section, names in OUTSIDE_DIGEST.items():
        if isinstance(kept.get(section), dict):
            kept[section] = {k: v for k, v in kept[section].items() if k not in names}
    return kept


def _both(ours: Path, theirs: Path, name: str, what: str) -> list[dict] | None:
    paths = [Path(run) / name for run in (ours, theirs)]
    if not all(path.exists() for path in paths):
        return None
    return [read_json(path, what) for path in paths]


def differing_lines(result: dict) -> list[str]:
    """What differs between the two sides besides the chains: the settings each run was
    given, and the conditions that change numbers."""
    lines = []
    if result.get("config_differing"):
        lines.append("settings that differ: " + "; ".join(result["config_differing"]))
    if result["numeric_conditions_differing"]:
        lines.append(
            "conditions that change numbers and differ: "
            + "; ".join(result["numeric_conditions_differing"])
        )
    return lines


def summary(result: dict) -> str:
    """What `reprodqn verify A B` prints."""
    first, runs = result["first_divergence"], plural(result["runs_compared"], "run")
    through = _through_words(result)
    if result["identical"]:
        lines = [
            f"verify: identical{through}: {runs}, every checkpoint's weights and loss chain"
            + files_checked(result)
        ]
    elif result.get("prefix"):
        lines = [prefix_line(result["prefix"], result["runs_compared"])]
    elif first is None:
        lines = [f"verify: DIFFERENT: the {runs} on both sides match; not every run is on both"]
    else:
        lines = [f"verify: DIFFERENT: {where(first['run'], first, first['fields'])}"]
    for side in ("ours", "reference"):
        if result[f"only_{side}"]:
            lines.append(f"only in {side}: {', '.join(result[f'only_{side}'])}")
    lines += uncompared.line(result.get("not_compared", []), bool(result.get("results_declared")))
    return "\n".join(lines + differing_lines(result) + [result["reference_replicates"]])


def _through_words(result: dict) -> str:
    """How far --until compared: the last checkpoint both sides have at or before it,
    named as such where it is not --until's own step."""
    until, through = result.get("until"), result.get("through")
    if until is None:
        return ""
    if through is None or through == until:
        return f" through step {until}"
    every = "every run has" if result["runs_compared"] > 1 else "both sides have"
    return f" through step {through} (the last checkpoint {every} at or before --until {until})"


def files_checked(result: dict) -> str:
    """The checkpoint files verify read, each against its chain line (none: nothing)."""
    count = result.get("checkpoint_files_checked", 0)
    return f", and {plural(count, 'checkpoint file')} against their chains" if count else ""


def where(run: str, found: dict, fields: list[str]) -> str:
    """Where a run leaves the reference's copy, from first_difference's record."""
    name = "the run" if run == "." else run
    if fields == ["length"]:
        longer = "ours" if found["ours"] else "the reference"
        same = (
            "has no checkpoint in common"
            if found["last_shared"] is None
            else f"is the same through step {found['last_shared']}"
        )
        return f"{name} {same}; {longer} goes on to step {found['step']} and the other stops"
    if fields == ["step"]:
        return (
            f"{name} has its checkpoints at other steps (the first that differs: {found['step']})"
        )
    return f"first divergence in {name} at checkpoint step {found['step']} ({', '.join(fields)})"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
