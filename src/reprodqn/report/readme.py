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
        else f"the code that ran (reprodqn {version}, the installed package, in code/reprodqn/)",
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


def text(root: Path, checkout: bool) -> str:
    """The page for the bundle of `root` (a checkout of reprodqn, or a workspace that ran
    the installed package)."""
    root = Path(root)
    packages = _json(root / workspace.conditions_path()).get("packages", {})
    torch = str(packages.get("torch", "2.13.0")).split("+")[0]
    # the version a workspace's stages recorded (results/installed.json), else this one's
    version = _json(root / workspace.RESULTS / workspace.INSTALLED).get("version", __version__)
    commit = provenance.git_info(root).get("commit") if checkout else None
    made = f"made with reprodqn {version}" + (f" (code at commit {commit})" if commit else "")
    install = (
        "pip install ./reprodqn-bundle   # reprodqn from this bundle's own code"
        if checkout
        else f"pip install reprodqn=={version}   # its files are code/reprodqn/ here"
    )
    return f"""# {_title(root)}

This is the study's bundle, {made}. It holds {_holds(root, checkout, version)}, and the
SHA-256 of every file (`MANIFEST.sha256`). `CITATION.cff` says what to cite;
`ro-crate-metadata.json` says what each file is.

## Check the files

From the folder that holds `reprodqn-bundle/`:

```sh
(cd reprodqn-bundle && sha256sum -c MANIFEST.sha256)
```

## Replicate the study, and compare

In a new folder beside this one, not in it (its runs are finished, so the pipeline would
train nothing here), from the same place:

```sh
python3.11 -m venv .venv && . .venv/bin/activate
pip install torch=={torch}
{install}
reprodqn init replication && cp reprodqn-bundle/params.yaml replication/
cd replication && dvc repro        # the whole study, at the bundle's params
reprodqn verify --reference ../reprodqn-bundle
```

`verify` checks this folder against its manifest, then compares every run's hash chain
with the one here: identical, or the first run and checkpoint where they part, with the
settings and conditions that differ. Runs that differ by design (the gpu group's) are
named and not counted. One run can be checked without the whole study:
`reprodqn verify --reference ../reprodqn-bundle --rerun deterministic/0 --until STEP`
retrains it here to a checkpoint step of its own and compares the records on the way.
"""
