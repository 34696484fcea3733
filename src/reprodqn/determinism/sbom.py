"""The CycloneDX bill of materials of the running Python environment (results/sbom.cdx.json):
made by cyclonedx-bom, made reproducible, and kept once made, since the same environment
always gives the same file and making it takes 20 s and more."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from reprodqn.core.digests import json_digest


def write_sbom(path: Path) -> dict:
    """A CycloneDX JSON SBOM of this Python environment at `path`. Making one takes cyclonedx
    20 s and more, and the same environment always gives the same file, so it is made once
    per environment: read from the environment itself if it carries one (`bake_sbom`, as the
    image does at build time), else from the user's cache, else made and kept in that cache
    (a cache that cannot be written is skipped). Both are named by a digest of every
    installed distribution's name, version and location and of this interpreter, so a
    changed environment never reads another's."""
    from reprodqn.core.atomic import write_json

    key = sbom_key()
    cached = sbom_cache_path(key)
    doc = read_kept(environment_sbom_path(key)) or read_kept(cached)
    if doc is None:
        doc = sbom_document()
        with contextlib.suppress(OSError):
            write_json(cached, doc)
    write_json(path, doc)
    return doc


def read_kept(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bake_sbom() -> Path:
    """Make this environment's SBOM and keep it inside the environment (sys.prefix), where
    every later `write_sbom` of the same environment reads it: the image's build does this
    once, so a study run in the image does not spend cyclonedx's 20 s and more."""
    from reprodqn.core.atomic import write_json

    path = environment_sbom_path(sbom_key())
    write_json(path, sbom_document())
    return path


def sbom_key() -> str:
    installed = sorted(
        (str(d.metadata["Name"]), d.version, str(getattr(d, "_path", "")))
        for d in metadata.distributions()
    )
    return json_digest({"python": sys.executable, "distributions": installed})


def environment_sbom_path(key: str) -> Path:
    return Path(sys.prefix) / "share" / "reprodqn" / "sbom" / f"{key}.json"


def sbom_cache_path(key: str) -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "reprodqn" / "sbom" / f"{key}.json"


def sbom_document() -> dict:
    """The SBOM as cyclonedx-bom writes it, reproducible: no timestamp or serial number,
    and nothing machine-specific. An editable install makes cyclonedx list the project
    twice, once under a random bom-ref and a file:// path; that copy is dropped, so the
    same environment always gives the same document."""
    import tempfile

    from reprodqn.core.errors import InputError

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "sbom.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cyclonedx_py",
                "environment",
                sys.executable,
                "--output-reproducible",
                "--of",
                "JSON",
                "-o",
                str(raw),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise InputError(f"cyclonedx-py could not write the SBOM: {last}")
        doc = json.loads(raw.read_text())
    dropped = {
        c["bom-ref"]
        for c in doc.get("components", [])
        if c.get("bom-ref", "").startswith("BomRef.")
    }
    doc["components"] = [c for c in doc.get("components", []) if c["bom-ref"] not in dropped]
    for component in doc["components"]:
        refs = [
            r
            for r in component.get("externalReferences", [])
            if not r.get("url", "").startswith("file:")
        ]
        if refs:
            component["externalReferences"] = refs
        else:
            component.pop("externalReferences", None)
    doc["dependencies"] = [
        {**d, "dependsOn": [r for r in d.get("dependsOn", []) if r not in dropped]}
        for d in doc.get("dependencies", [])
        if d.get("ref") not in dropped
    ]
    return doc
