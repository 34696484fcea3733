"""REPLICATE.md, the bundle's first page for a reader who has only the archive: what it
holds, how to check it, and the commands that replicate the study beside it and compare.
Everything in it comes from the bundled files (no clock, no machine), so the archive stays
byte for byte reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from reprodqn import __version__
from reprodqn.core import workspace
from reprodqn.determinism import provenance

NAME = workspace.REPLICATE


def _json(path: Path) -> dict:
    """A JSON record, or nothing where there is none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _title(root: Path) -> str:
    try:
        return str(yaml.safe_load((root / "CITATION.cff").read_text())["title"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return "A reprodqn study"


def _holds(root: Path, checkout: bool, version: str) -> str:
    """What the bundle holds, as far as the study made it."""
    parts = [
        "the code (a checkout of reprodqn, its tracked files)"
        if checkout
        else f"the code that ran (reprodqn {version}, the installed package: `code/` holds "
        "the wheel's contents)",
        "the params (`params.yaml`)",
    ]
    if (root / "dvc.lock").exists():
        parts.append("the pipeline and its lock (`dvc.yaml`, `dvc.lock`)")
    parts += [
        "the conditions it ran under and its SBOM (`results/`)",
        "every run's hash chains and records (`runs/`)",
    ]
    if (root / workspace.REPORTS / "report.html").exists():
        parts.append("the evaluations and the report (`reports/report.html`)")
    return ", ".join(parts)


def _steps(steps: list[int]) -> str:
    """Checkpoint steps as a reader can read them: all, or the first, the last and the gap."""
    if len(steps) <= 8:
        return ", ".join(f"{step:,}" for step in steps)
    gap = steps[1] - steps[0]
    if all(b - a == gap for a, b in zip(steps, steps[1:], strict=False)):
        return f"{steps[0]:,}, {steps[1]:,}, …, {steps[-1]:,} (every {gap:,})"
    return f"{steps[0]:,}, {steps[1]:,}, …, {steps[-1]:,} (as `hashes.jsonl` lists them)"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def training_seconds(root: Path) -> tuple[float, float, int]:
    """The study's training time as its runs measured it (each process record: steps since
    the last over the rate it gives): in all, the longest run's, and how many runs."""
    times = []
    for run_dir in sorted((root / workspace.RUNS).glob("*/*")):
        seconds, previous = 0.0, 0
        for record in workspace.read_process(run_dir):
            rate = record.get("steps_per_second") or 0
            if rate > 0:
                seconds += (record["step"] - previous) / rate
            previous = record["step"]
        if seconds:
            times.append(seconds)
    return sum(times), max(times, default=0.0), len(times)


def _time_line(root: Path) -> str:
    total, longest, runs = training_seconds(root)
    machine = _json(root / workspace.conditions_path()).get("device_name", "its machine")
    if not runs:
        return "The runs record no training time."
    return (
        f"Training took {_duration(total)} in all on {machine} ({runs} runs, the longest "
        f"{_duration(longest)}; as the runs' own process records measured it), so about "
        f"{_duration(total)} on one core, or the longest run's time with a worker per run "
        "(`REPRODQN_WORKERS`). `dvc repro` adds each run's start (Python, torch, the "
        "emulator) and the conditions, audit, evaluation and report stages: little beside "
        "hours of training, more than training itself at a small scale."
    )


def _rerun_lines(root: Path) -> str:
    """The steps `--rerun deterministic/0 --until` takes, and where a shipped resume point
    lets it start."""
    run_dir = workspace.run_dir(root / workspace.RUNS, "deterministic", 0)
    steps = [line["step"] for line in workspace.read_hashes(run_dir) if line["step"] > 0]
    if not steps:
        return "This bundle has no trained deterministic/0 to spot-check."
    resume = workspace.latest_resume_step(workspace.resume_points_dir(root, "deterministic", 0))
    start = (
        f" It starts from the resume point shipped at step {resume:,}, so a STEP after it "
        "retrains only the steps between."
        if resume
        else " It retrains from step 0."
    )
    return (
        f"STEP is any step from 1 to {steps[-1]:,}; the checkpoints it compares are at "
        f"{_steps(steps)}, so a STEP at one of them checks the most for its time.{start}"
    )


# what the page says besides what the bundle gives it
COMPARED = """\
`verify --reference` compares every run's hash chains (the weights and every loss), the
checkpoint files it finds and the scores both sides evaluated: identical, or the first
run and checkpoint where they part, with the settings and conditions that differ. Runs
that differ by design (the gpu group's on a CPU) are named and not counted.

## 4. Check one run, without the whole study

In the folder of step 2, beside `reprodqn-bundle/` (no replication needed):

```sh
reprodqn verify --reference reprodqn-bundle --rerun deterministic/0 --until STEP
```

"""
SPOT_CHECK = """\
It retrains the run here to STEP and compares its checkpoints' chains
and every `process.jsonl` record up to STEP by value (losses, epsilon, scores), then
replays `--episodes K` (default 10) evaluation episodes of its last checkpoint against
`eval.csv`. It checks that one run to STEP, not the others, nor the steps after it."""
CHECKS = """\
## 1. What `verify reprodqn-bundle` checks

Each link, in order; the first that fails is named in one line (exit 1):

- **manifest**: every file has its SHA-256, and no unlisted file sits where verify reads;
- **signature**: `MANIFEST.sha256.sig` signs the manifest, by the key `--signer` gives
  (`SIGNER.pub` names who signed); an unsigned bundle is said to be unsigned;
- **crate**: the RO-Crate lists the manifest's files with the same SHA-256s;
- **params**: `params.yaml` gives every run the config digest its `config.json` records;
- **checkpoints**: each shipped checkpoint holds the weights its chain records;
- **report**: Table 1, the curves, the variance tests, the verdict and the pages, rebuilt
  from the runs' records and `eval.csv` files, equal the shipped ones;
- **evaluate** (`--evaluate K`, where the bundle ships checkpoints): K evaluation
  episodes, evenly spaced over their `eval.csv` rows, played again give their rows.

It does not check that training computes these chains and evaluation these scores: a
bundle whose every file was remade to agree is consistent. Steps 3 and 4 check that.
Without reprodqn, `(cd reprodqn-bundle && sha256sum -c MANIFEST.sha256)` checks the listed
files only.

"""


def text(root: Path, checkout: bool) -> str:
    """The page for the bundle of `root` (a checkout of reprodqn, or a workspace that ran
    the installed package)."""
    from reprodqn.report.wheel import wheel_name

    root = Path(root)
    packages = _json(root / workspace.conditions_path()).get("packages", {})
    torch = str(packages.get("torch", "2.13.0")).split("+")[0]
    # the version a workspace's stages recorded (results/installed.json), else this one's
    version = _json(root / workspace.RESULTS / workspace.INSTALLED).get("version", __version__)
    commit = provenance.git_info(root).get("commit") if checkout else None
    made = f"made with reprodqn {version}" + (f" (code at commit {commit})" if commit else "")
    return f"""# {_title(root)}

First, check the bundle on its own (seconds, no training; install reprodqn as in step 2):

```sh
reprodqn verify reprodqn-bundle            # --signer KEY.pub: against the key you trust
```

This is the study's bundle, {made}. It holds {_holds(root, checkout, version)}, the
package as a wheel (`wheels/`) with the lock it ran under (`requirements.lock`), and the
SHA-256 of every file (`MANIFEST.sha256`). `CITATION.cff` says what to cite;
`ro-crate-metadata.json` says what each file is.

{CHECKS}## 2. Install, from this archive

In a new folder beside `reprodqn-bundle/`, not in it (its runs are finished, and the
commands that write results refuse to run inside it):

```sh
python3.11 -m venv .venv && . .venv/bin/activate
pip install torch=={torch}
pip install -r reprodqn-bundle/requirements.lock
pip install --no-deps reprodqn-bundle/wheels/{wheel_name()}
```

## 3. Replicate the study, and compare

```sh
reprodqn init replication && cp reprodqn-bundle/params.yaml replication/
cd replication && dvc repro        # the whole study, at the bundle's params
reprodqn verify --reference ../reprodqn-bundle
```

{_time_line(root)}

{COMPARED}{_rerun_lines(root)} {SPOT_CHECK}"""
