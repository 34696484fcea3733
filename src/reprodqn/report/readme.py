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

NAME = "REPLICATE.md"


def _recorded(root: Path) -> dict:
    """The study's conditions record, or nothing where there is none."""
    try:
        return json.loads((root / workspace.conditions_path()).read_text())
    except (OSError, ValueError):
        return {}


def _title(root: Path) -> str:
    try:
        return str(yaml.safe_load((root / "CITATION.cff").read_text())["title"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return "A reprodqn study"


def text(root: Path, checkout: bool) -> str:
    """The page for the bundle of `root` (a checkout of reprodqn, or a workspace that ran
    the installed package)."""
    root = Path(root)
    conditions = _recorded(root)
    packages = conditions.get("packages", {})
    torch = str(packages.get("torch", "2.13.0")).split("+")[0]
    version = packages.get("reprodqn", __version__)  # the recorded one, else this bundler's
    commit = provenance.git_info(root).get("commit") or "unknown"
    install = (
        "pip install ./reprodqn-bundle   # reprodqn from this bundle's own code"
        if checkout
        else f"pip install reprodqn=={version}   # its files are code/reprodqn/ here"
    )
    code = (
        "the code (a checkout of reprodqn, its tracked files)"
        if checkout
        else f"the code that ran (reprodqn {version}, the installed package, in code/reprodqn/)"
    )
    return f"""# {_title(root)}

This is the study's bundle, made with reprodqn (code at commit {commit}). It holds {code}, the
params (`params.yaml`), the pipeline and its lock (`dvc.yaml`, `dvc.lock`), the start
states, the conditions it ran under and its SBOM (`results/`), every run's hash chains
and records (`runs/`), the evaluations and the report (`reports/report.html`), and the
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
`reprodqn verify --reference ../reprodqn-bundle --rerun deterministic/0 --until 100000`
retrains it here to that step and compares the records on the way.
"""
