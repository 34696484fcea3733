"""REPLICATE.md, the bundle's first page for a reader who has only the archive: what it
holds, how to check it, and the commands that replicate the study beside it and compare.
Everything in it comes from the bundled files (no clock, no machine), so the archive stays
byte for byte reproducible."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from reprodqn.core import workspace
from reprodqn.determinism import replication_scope
from reprodqn.report.lock import TORCH_INDEX

NAME = workspace.REPLICATE
TORCH_PIN = "2.13.0"  # pyproject.toml's, for a study whose conditions record no torch


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


def _replicates(root: Path) -> str:
    """Where the study's results replicate, from the conditions its runs recorded."""
    records = replication_scope.recorded_conditions(root)
    sentence = replication_scope.where_it_replicates(records, "This bundle's results")
    return f"**Where it replicates.** {sentence}"


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

## 5. Check one run, without the whole study

In the folder of step 2, beside `reprodqn-bundle/` (no replication needed):

```sh
reprodqn verify --reference reprodqn-bundle --rerun deterministic/0 --until STEP
```

"""
SPOT_CHECK = """\
It retrains the run here to STEP and compares its checkpoints' chains
and every `process.jsonl` record up to STEP by value (losses, epsilon, scores), then
replays `--episodes K` (default 10) evaluation episodes of its step-0 checkpoint and of
its last against `eval.csv`. It checks that one run to STEP, not the others, nor the
steps after it.

To vouch for what you found, add `--attest ~/.ssh/id_ed25519` to the `verify
--reference` of step 4 or 5: a signed statement of it (an in-toto Statement, with your
machine) goes to `attestations/` beside the bundle; send it to the authors, whose next
bundle ships it, and `verify reprodqn-bundle` counts the machines that replicated the
study and lists the spot-checks apart."""
CHECKS = """\
## 3. What `verify reprodqn-bundle` checks

Each link, in order; the first that fails is named in one line (exit 1):

- **manifest**: every file has its SHA-256, and the manifest lists every file;
- **signature**: `MANIFEST.sha256.sig` signs the manifest, by the key `--signer` gives;
  without it, the signing key's fingerprint is shown for you to compare with the paper's;
  an unsigned bundle is said to be unsigned;
- **crate**: the RO-Crate lists the manifest's files with the same SHA-256s;
- **code, pipeline, conditions, runs**: what the bundle says twice says the same: the
  wheel and `code/`; `dvc.lock`'s params and `params.yaml`; the fingerprint, each run's
  conditions, `results/conditions.json` and the lock's pins; each run's `complete.json`
  and `process.jsonl` and its chain;
- **params**: `params.yaml` gives every run the config digest its `config.json` records;
- **checkpoints**: each shipped checkpoint holds the weights its chain records;
- **report**: Table 1, the curves, the variance tests, the verdict and the pages, rebuilt
  from the runs' records and `eval.csv` files, equal the shipped ones;
- **evaluate** (`--evaluate K`, where the bundle ships checkpoints): K evaluation
  episodes, evenly spaced over their `eval.csv` rows, played again give their rows;
- **page**: this page is the one the bundle's files give.

It does not check that training computes these chains and evaluation these scores: a
bundle whose every file was remade to agree is consistent. Steps 4 and 5 check that;
without shipped checkpoints, a score is checked only by them, and its verdict says so.

"""
REPLICATE = """\
## 4. Replicate the study, and compare

```sh
reprodqn init replication && cp reprodqn-bundle/params.yaml replication/
cd replication && dvc repro        # the whole study, at the bundle's params
reprodqn verify --reference ../reprodqn-bundle
```

"""
TRUST = """\
With tools you already have (coreutils, OpenSSH), not with anything in the archive: a
wheel altered in the archive would install a checker that says "consistent" to anything.

```sh
sha256sum ARCHIVE              # the SHA-256 the paper publishes for the archive: the same?
cd reprodqn-bundle
sha256sum --quiet -c MANIFEST.sha256                # every listed file has its SHA-256
find . -type f ! -name 'MANIFEST.sha256*' | cut -c3- | LC_ALL=C sort > ../held.txt
cut -c67- MANIFEST.sha256 | LC_ALL=C sort | diff - ../held.txt   # no file left unlisted
cd ..
```

(ARCHIVE is the `.tar.gz` you unpacked; on macOS, `shasum -a 256` for `sha256sum`.) The
`diff` prints nothing when the manifest lists every file. The manifest gives the SHA-256
of every file, the wheel and the lock included, so these hold for them too.
"""
SIGNED = """\
The bundle is signed: `MANIFEST.sha256.sig` signs the manifest. Check it with the author's
public key as the paper (or the author's page) publishes it, saved as `AUTHOR_KEY.pub`,
never with the bundle's own `SIGNER.pub`: anyone can sign with a key of their own, and
write any name on it.

```sh
echo "author $(cat AUTHOR_KEY.pub)" > allowed_signers
cd reprodqn-bundle
ssh-keygen -Y verify -f ../allowed_signers -I author -n reprodqn-bundle \\
  -s MANIFEST.sha256.sig < MANIFEST.sha256
cd ..
```

"Good "reprodqn-bundle" signature for author" and the exit status 0: the author signed
these files.
"""
UNSIGNED = """\
The bundle is unsigned: the archive's SHA-256, as the paper publishes it, is all that
vouches for it.
"""
LOCK_UNHASHED = (
    "The lock's pins carry no hashes (its header says why), so they install from your\n"
    "package index by version."
)


def text(root: Path, checkout: bool, shipped: Shipped) -> str:
    """The page for the bundle of `root` (a checkout of reprodqn, or a workspace that ran
    the installed package), from the bundled files and `shipped`: what the bundle adds."""
    root = Path(root)
    packages = _json(root / workspace.conditions_path()).get("packages", {})
    torch = str(packages.get("torch") or "")  # with its build's label (+cpu) if any
    # the version a workspace's stages recorded (results/installed.json), else the wheel's
    wheel_version = Path(shipped.wheel).name.split("-")[1]
    version = _json(root / workspace.RESULTS / workspace.INSTALLED).get("version", wheel_version)
    commit = shipped.commit if checkout else None
    made = f"made with reprodqn {version}" + (f" (code at commit {commit})" if commit else "")
    return f"""# {_title(root)}

This is the study's bundle, {made}. It holds {_holds(root, checkout, version)}, the
package as a wheel (`wheels/`) with the lock it ran under (`requirements.lock`), and the
SHA-256 of every file (`MANIFEST.sha256`). `CITATION.cff` says what to cite;
`ro-crate-metadata.json` says what each file is.

{_replicates(root)}

{trust_section(shipped)}{install_section(torch, shipped)}{CHECKS}{REPLICATE}
{_time_line(root)}

{COMPARED}{_rerun_lines(root)} {SPOT_CHECK}"""


@dataclass(frozen=True)
class Shipped:
    """What the page says that the study's files do not: the wheel (its path in the bundle
    and SHA-256), whether the manifest is signed, whether the lock carries hashes (a
    workspace's is made with the bundle), the checkout's commit."""

    wheel: str
    wheel_sha256: str
    signed: bool
    lock_hashed: bool
    commit: str | None = None


def trust_section(shipped: Shipped) -> str:
    """Step 1: the archive checked with tools the reader already trusts, before anything
    from it is installed or run (a checker installed from the archive cannot vouch for
    the archive)."""
    signature = SIGNED if shipped.signed else UNSIGNED
    return f"""## 1. Before you install or run anything from it: check the archive

{TRUST}
{signature}
"""


def install_section(torch: str, shipped: Shipped) -> str:
    """Step 3: the lock, then the wheel by the SHA-256 the signed manifest gives; torch
    first, by its version, and the build the study ran (`torch`: conditions.json's, '' if
    none is recorded: the package's pin)."""
    hashed = shipped.lock_hashed
    lock = "pip install --require-hashes" if hashed else "pip install"
    public, _, label = (torch or TORCH_PIN).partition("+")
    build = (  # the build's own index: the version's local label names it (+cpu, +cu128)
        f": `pip install torch=={torch} --index-url {TORCH_INDEX}/{label}` installs that build"
        if label
        else ""
    )
    ran = f" The study\nran torch {torch}{build}." if torch else ""
    return f"""## 2. Install, from this archive

In the folder that holds `reprodqn-bundle/` (not inside it: its runs are finished, and the
commands that write results refuse to run there), after step 1:

```sh
python3.11 -m venv .venv && . .venv/bin/activate
pip install torch=={public}
{lock} -r reprodqn-bundle/requirements.lock
echo "reprodqn-bundle/{shipped.wheel} --hash=sha256:{shipped.wheel_sha256}" > wheel.txt
pip install --no-deps --require-hashes -r wheel.txt
```

The wheel installs only with the SHA-256 the manifest gives it (the manifest step 1
checked); torch by its version, as its build (CPU or CUDA) is your machine's.{ran}
{"The lock's pins carry their hashes too." if hashed else LOCK_UNHASHED}

Then check the bundle with what you installed (seconds, no training):

```sh
reprodqn verify reprodqn-bundle            # --signer AUTHOR_KEY.pub: against the author's key
```

It checks from the bundle's own wheel, so it cannot vouch for that wheel: step 1 does.

"""
