"""The bundle's metadata for archives and readers: CITATION.cff (what to cite, checked
against the Citation File Format 1.2.0 schema) and ro-crate-metadata.json (an RO-Crate, made
with the `rocrate` library) saying what every file in the bundle is: the workflow
(dvc.yaml, params, code), its inputs (start sequences, the ROM's hash), its outputs (runs,
evaluations, report), the software (the SBOM) and the conditions, each file with the
SHA-256 the manifest gives. Both carry the commit's date, never the clock's, so the
bundle stays byte for byte reproducible.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import yaml

from reprodqn.core import packaged, workspace
from reprodqn.core.errors import InputError

CFF_SCHEMA = "cff-1.2.0.schema.json"  # citation-file-format/citation-file-format, CC-BY-4.0
# a resume point is a run's state part way: made by the study, as its records are
OUTPUT_DIRS = ("runs/", "evaluations/", "reports/", "ranker/", "resume-points/")
SOFTWARE = "results/sbom.cdx.json"
# the audit says which ops of this build would be nondeterministic: a condition of the run
CONDITIONS = ("results/conditions.json", "results/fingerprint.json", "results/audit.json")
PLAYED = (workspace.RESULTS / workspace.EVALUATION_STATES).as_posix()  # start states, by content


def release_date(git: dict) -> str:
    """The date the bundle's code was committed, from `provenance.git_info`
    (SOURCE_DATE_EPOCH overrides; today only outside git): the same commit always gives the
    same metadata."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), UTC).date().isoformat()
    return git.get("date") or datetime.now(UTC).date().isoformat()


def citation(root: Path, commit: str | None, date: str) -> str:
    """CITATION.cff: the repository's own (authors, title, the paper it replicates under
    references) with this bundle's version, commit and date filled in."""
    source = Path(root) / "CITATION.cff"
    try:
        doc = yaml.safe_load(source.read_text())
    except FileNotFoundError:
        raise InputError(f"{source}: not found; the bundle's citation starts from it") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a mapping of CITATION.cff keys")
    doc["version"] = packaged.version()  # pyproject.toml's, the one place it is kept
    doc["date-released"] = date
    if commit:
        doc["commit"] = commit
    validate_citation(doc, str(source))
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def validate_citation(doc: dict, where: str) -> None:
    """Check a CITATION.cff document against the CFF 1.2.0 schema; one line on failure."""
    import jsonschema

    schema = json.loads(resources.files("reprodqn.report").joinpath(CFF_SCHEMA).read_text())
    plain = json.loads(json.dumps(doc, default=str))  # YAML dates as the schema's strings
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(plain))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise InputError(
            f"{where}: {field}: {error.message.splitlines()[0]} (Citation File Format 1.2.0)"
        )


def rom_sha256() -> dict:
    """The Breakout ROM the runs played: ale-py ships it, the bundle does not (license)."""
    from importlib.metadata import version

    from reprodqn.training.atari import rom_path

    path = rom_path("breakout")
    return {
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "file": path.name,
        "ale_py": version("ale-py"),
    }


def role(path: str) -> str:
    """Which part of the study a bundled file is."""
    if path == SOFTWARE:
        return "software"
    if path in CONDITIONS or (path.startswith("runs/") and path.endswith("/conditions.json")):
        return "conditions"
    if path == PLAYED or (path.startswith("start_sequences/") and not path.endswith("dvc.yaml")):
        return "input"
    if path.startswith(OUTPUT_DIRS):
        return "output"
    return "workflow"


def _add_files(rc, files: dict[str, str], sizes: dict[str, int]) -> dict:
    """Each file as a crate entity with its hash, size and role; dvc.yaml is the workflow."""
    entities = {}
    for path in sorted(files):
        kinds = ["File"]
        if path == "dvc.yaml":
            kinds += ["SoftwareSourceCode", "ComputationalWorkflow"]
        entities[path] = rc.add_file(
            None,
            path,
            properties={
                "@type": kinds[0] if len(kinds) == 1 else kinds,
                "sha256": files[path],
                "contentSize": sizes[path],
                "additionalType": role(path),
            },
        )
    return entities


def crate(files: dict[str, str], sizes: dict[str, int], meta: dict, rom: dict) -> str:
    """ro-crate-metadata.json for the bundle's files (path -> SHA-256), as JSON text."""
    from rocrate.rocrate import ROCrate

    rc = ROCrate()
    rc.name = meta["title"]
    rc.description = meta.get("abstract", meta["title"])
    rc.datePublished = meta["date-released"]
    rc.root_dataset["license"] = meta.get("license")
    rc.root_dataset["version"] = str(meta.get("version", ""))
    language = rc.add_jsonld(
        {
            "@id": "https://dvc.org/",
            "@type": "ComputerLanguage",
            "name": "DVC",
            "url": "https://dvc.org/",
        }
    )
    entities = _add_files(rc, files, sizes)
    workflow = entities["dvc.yaml"]
    workflow["programmingLanguage"] = language
    workflow["name"] = "The study pipeline (dvc repro)"
    rc.root_dataset["mainEntity"] = workflow
    rom_entity = rc.add_jsonld(
        {
            "@id": "#breakout-rom",
            "@type": "CreativeWork",
            "sha256": rom["sha256"],
            "name": f"Atari 2600 Breakout ROM ({rom['file']}, shipped with ale-py "
            f"{rom['ale_py']}; not in this bundle)",
        }
    )
    by_role: dict[str, list] = {}  # role -> the crate's entities
    for path, entity in entities.items():
        by_role.setdefault(role(path), []).append(entity)
    rc.add_action(
        workflow,
        identifier="#study",
        object=[*by_role.get("input", []), rom_entity],
        result=by_role.get("output", []),
        properties={
            "name": "The study: dvc repro with params.yaml",
            "endTime": meta["date-released"],
            "instrument": [workflow, *by_role.get("software", []), *by_role.get("conditions", [])],
        },
    )
    for name, members in sorted(by_role.items()):
        rc.add_jsonld(
            {
                "@id": f"#{name}",
                "@type": "Collection",
                "name": name,
                "hasPart": [{"@id": e.id} for e in members],
            }
        )
    return json.dumps(rc.metadata.generate(), indent=2, sort_keys=True) + "\n"
