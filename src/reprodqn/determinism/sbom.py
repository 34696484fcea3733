"""The CycloneDX bill of materials of the running Python environment (results/sbom.cdx.json):
made by cyclonedx-bom, made reproducible, and kept once per environment, since the same
environment always gives the same file and making it takes a few seconds; a reprodqn.exact run
folder holds a hard link to the kept file."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from reprodqn.core.digests import json_digest


def write_sbom(path: Path) -> dict:
    """A CycloneDX JSON SBOM of this Python environment at `path` (the study's
    results/sbom.cdx.json), written in full. Making one takes cyclonedx a few seconds, and
    the same environment always gives the same file, so it is made once per environment:
    read from the environment itself if it carries one (`bake_sbom`, as the image does at
    build time), else from the user's cache, else made and kept in that cache (a cache that
    cannot be written is skipped). Both are named by `sbom_key`, so a changed environment
    never reads another's."""
    from reprodqn.core.atomic import write_json

    doc = kept_sbom()[1]
    write_json(path, doc)
    return doc


def link_sbom(path: Path) -> str:
    """The environment's kept SBOM at `path` as a hard link to the kept file (a run folder's
    copy costs no time and no disk), else a copy (another filesystem), else written (no
    cache could be kept). The kept file is read-only, so neither name can change the
    other. Returns "linked", "copied" or "written"."""
    from reprodqn.core.atomic import write_json, write_text

    kept, doc = kept_sbom()
    if kept is not None:
        try:
            os.link(kept, path)
            return "linked"
        except OSError:
            with contextlib.suppress(OSError):
                write_text(path, kept.read_text())
                return "copied"
    write_json(path, doc)
    return "written"


def kept_sbom() -> tuple[Path | None, dict]:
    """The file this environment's SBOM is kept in (baked, else cached, made and cached
    now where neither is) and its document; no file where the cache cannot be written."""
    from reprodqn.core.atomic import write_json

    key = sbom_key()
    for kept in (environment_sbom_path(key), sbom_cache_path(key)):
        doc = read_kept(kept)
        if doc is not None:
            return kept, doc
    doc = sbom_document()
    cached = sbom_cache_path(key)
    try:
        write_json(cached, doc)
        cached.chmod(0o444)
    except OSError:
        return None, doc
    return cached, doc


def read_kept(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bake_sbom() -> Path:
    """Make this environment's SBOM and keep it inside the environment (sys.prefix), where
    every later `write_sbom` of the same environment reads it: the image's build does this
    once, so a study run in the image does not wait for cyclonedx."""
    from reprodqn.core.atomic import write_json

    path = environment_sbom_path(sbom_key())
    write_json(path, sbom_document())
    return path


def sbom_key() -> str:
    """A digest of this interpreter and its prefix and of every distribution's metadata
    folder on sys.path (where importlib.metadata finds them; a folder's name holds the
    distribution's name and version). Read from the folder listings: parsing each
    distribution's metadata took 0.1-0.25 s at every start."""
    installed = sorted(
        (entry, name)
        for entry in dict.fromkeys(sys.path)
        if entry and os.path.isdir(entry)
        for name in _listing(entry)
        if name.endswith((".dist-info", ".egg-info"))
    )
    return json_digest({"python": sys.executable, "prefix": sys.prefix, "distributions": installed})


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def environment_sbom_path(key: str) -> Path:
    return Path(sys.prefix) / "share" / "reprodqn" / "sbom" / f"{key}.json"


def sbom_cache_path(key: str) -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "reprodqn" / "sbom" / f"{key}.json"


def sbom_document() -> dict:
    """The SBOM as cyclonedx-bom writes it, reproducible: no timestamp or serial number,
    and nothing machine-specific. An editable install makes cyclonedx list the project
    twice, once under a random bom-ref and a file:// path; that copy is dropped, so the
    same environment always gives the same document. cyclonedx's check of its own output
    against the schema is skipped: it took 36 of its 43 s (jsonschema parsing each URL as
    an IRI); the tests check the document written against the schema."""
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
                "--no-validate",
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
