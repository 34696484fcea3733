"""One run of any training script that keeps reprodqn.exact's chain, rerun here to a step
(`reprodqn verify RUN --until STEP`): the command its config.json records, run again into
a scratch folder, and the chain it writes compared with the start of the run's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.digests import sha256_file
from reprodqn.core.errors import InputError
from reprodqn.determinism import isa
from reprodqn.determinism.replication_scope import folder_conditions, where_it_replicates
from reprodqn.forensics.chains import (
    differing_lines,
    first_difference,
    numeric_conditions_differing,
)


def rerun(run: Path, until: int, scratch: Path, script: Path | None = None) -> dict:
    """Run the command that wrote `run` (its config.json's, recorded by exact.start_run)
    again here, into `scratch` and only up to step `until` (the script's own `--out` and
    `--until`), and compare the chain it writes with the start of `run`'s."""
    run, scratch = Path(run), Path(scratch).resolve()  # the script runs in its own cwd
    recorded = read_json(run / workspace.RUN_CONFIG, "run config")
    command = recorded.get("command")
    if not command:
        raise InputError(f"{run}: its config.json records no command (exact.start_run writes it)")
    cwd = Path(command["cwd"]) if Path(command["cwd"]).is_dir() else Path.cwd()
    path = Path(script).resolve() if script is not None else cwd / command["script"]
    if not path.is_file():
        raise InputError(f"{path}: the script that wrote {run} is not here (give --script PATH)")
    if scratch.exists() and any(scratch.iterdir()):
        raise InputError(f"{scratch}: not empty (the rerun writes a fresh run; give --scratch)")
    arguments = _out_and_until(command["arguments"], run, scratch, until)
    done = subprocess.run(
        [sys.executable, str(path), *arguments],
        cwd=cwd,
        stdout=sys.stderr,
        env=isa.environment_as_started(),  # not the floor this command applied for itself
    )
    if done.returncode != 0:
        raise InputError(f"{path}: exited {done.returncode} rerunning {run} to step {until}")
    ours, theirs = workspace.read_hashes(scratch), workspace.read_hashes(run)
    if not ours:
        raise InputError(
            f"{scratch / workspace.HASHES}: the rerun of {path} wrote no chain (expected the "
            "script to write its run where --out names)"
        )
    if not theirs:
        raise InputError(
            f"{run / workspace.HASHES}: the run recorded no checkpoint (killed before its "
            "first?), so there is nothing to compare a rerun with"
        )
    shared = min(len(ours), len(theirs))  # a recorded run stopped early is compared so far
    first = first_difference(ours[:shared], theirs[:shared])
    return {
        "identical": first is None,
        "run": str(run),
        "until": until,
        "last_step": ours[shared - 1]["step"],  # the last both have: --until, or an end
        "records_compared": shared,
        "first_divergence": first,
        "numeric_conditions_differing": numeric_conditions_differing(scratch, run),
        # not the script that wrote the run (False where its SHA-256 was not recorded)
        "script_differs": recorded.get("script_sha256") not in (None, sha256_file(path)),
        # its own modules (a local models.py) as the run recorded them, here beside it
        "code_differs": differing_code(recorded, path.resolve().parent, path.name),
        "run_replicates": where_it_replicates(folder_conditions([run]), "This run's results"),
    }


def _out_and_until(arguments: list[str], run: Path, scratch: Path, until: int) -> list[str]:
    """The recorded arguments with --out naming the scratch folder and --until the step."""
    kept, out_given, skip = [], False, False
    for index, argument in enumerate(arguments):
        if skip:
            skip = False
            continue
        name = argument.split("=", 1)[0]
        if name in ("--out", "--until"):
            skip = "=" not in argument and index + 1 < len(arguments)
            out_given |= name == "--out"
            continue
        kept.append(argument)
    if not out_given:
        raise InputError(
            f"{run}: its command has no --out (verify --until reruns scripts with one)"
        )
    return [*kept, "--out", str(scratch), "--until", str(until)]


def differing_code(recorded: dict, root: Path, script: str) -> list[str]:
    """The script's modules a run recorded (config.json's code_sha256) whose file under
    `root`, the script's folder here, is missing or differs; the script itself apart
    (script_differs says it, whatever --script names it)."""
    differing = []
    for name, digest in sorted((recorded.get("code_sha256") or {}).items()):
        if name == script or name == Path(recorded["command"]["script"]).name:
            continue
        path = Path(root) / name
        if not path.is_file():
            differing.append(f"{name} (missing)")
        elif sha256_file(path) != digest:
            differing.append(name)
    return differing


def rerun_summary(result: dict) -> str:
    """What `reprodqn verify RUN --until STEP` prints."""
    first, last = result["first_divergence"], result.get("last_step", result["until"])
    if result["identical"] and last != result["until"]:  # the script or the run stopped sooner
        lines = [
            f"verify: identical: {result['run']} rerun here with --until {result['until']} "
            f"is the same through step {last}, the last checkpoint both have; "
            f"{result['records_compared']} checkpoints match"
        ]
    elif result["identical"]:
        lines = [
            f"verify: identical: {result['run']} rerun here to step {result['until']}; "
            f"{result['records_compared']} checkpoints match"
        ]
    else:
        lines = [
            f"verify: DIFFERENT: rerun here, {result['run']} parts at checkpoint step "
            f"{first['step']} ({', '.join(first['fields'])})"
        ]
    if result.get("script_differs"):
        lines.append("the script rerun here is not the one that wrote the run (its SHA-256)")
    if result.get("code_differs"):
        lines.append(
            "the script's modules here are not the ones that wrote the run (their SHA-256): "
            + ", ".join(result["code_differs"])
        )
    return "\n".join(lines + differing_lines(result) + [result["run_replicates"]])
