"""The bundle: one archive a paper can link to, holding what a reader needs to replicate
the study and to check a replication against it (`reprodqn verify --reference`).

Code, params, the pipeline and its lock, start sequences, conditions and SBOM, every
run's hash chains and records, evaluation results and the report, with a manifest of
SHA-256s; weights only on request. CITATION.cff and an RO-Crate (artifact.py) say what to
cite and what each file is, for an archive and for a reader. The archive itself is
reproducible: sorted entries, fixed times and owners, so the same files always give the
same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from reprodqn.core import packaged, pipelines, run_lock, workspace
from reprodqn.core.atomic import atomic_open
from reprodqn.core.digests import sha256_file
from reprodqn.core.errors import InputError
from reprodqn.determinism import provenance
from reprodqn.report import citation, lock, readme, signing, wheel

PROJECT_FILES = (
    "README.md",
    "LICENSE",
    "copier.yml",
    "CHANGELOG.md",
    "mkdocs.yml",
    "CITATION.cff",
    "Makefile",
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "requirements.lock",
    "params.yaml",
    "dvc.yaml",
    "dvc.lock",
    ".dvcignore",
    ".dvc/config",
    ".gitignore",
)
PROJECT_DIRS = (
    *("src", "tests", "tools", "bench", "experiments", "examples", "template"),
    *(".ci", "presets", "docs"),
)
WORKSPACE_DIRS = ("presets",)  # a workspace's own overlays beside its params.yaml
ROOT = "reprodqn-bundle"
METADATA = ("CITATION.cff", workspace.CRATE)  # written by the bundle, for archives
MANIFEST = workspace.MANIFEST
ATTESTATIONS = "attestations"  # forensics.attestation's FOLDER: replications received


def manifest_text(hashes: dict[str, str]) -> str:
    """The manifest: `sha256  name` per file, sorted by name (sha256sum's format)."""
    return "".join(f"{hashes[name]}  {name}\n" for name in sorted(hashes))


def is_checkout(root: Path) -> bool:
    """A checkout of reprodqn (its code is its own files), not a workspace that runs the
    installed package (`reprodqn init`'s, or a checkout's scratch one such as build/smoke)."""
    return (root / "pyproject.toml").is_file() and (root / "src" / "reprodqn").is_dir()


def _tracked(root: Path) -> list[Path]:
    """Git-tracked project files when git knows them, else the project's own layout; in a
    workspace, only its own files (its code is the installed package: code_files)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=20
        )
        if out.returncode == 0 and out.stdout:
            return [Path(p) for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.TimeoutExpired):
        pass
    files = [Path(f) for f in PROJECT_FILES if (root / f).is_file()]
    for directory in PROJECT_DIRS if is_checkout(root) else WORKSPACE_DIRS:
        files += [
            p.relative_to(root)
            for p in (root / directory).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return files


def collect(root: Path, checkpoints: bool) -> list[Path]:
    root = Path(root)
    runs = root / workspace.RUNS
    if not runs.is_dir():
        raise InputError(f"{runs}: no runs to bundle; run the study first")
    files = set(_tracked(root))
    for directory in workspace.RESULT_DIRS:
        files |= {
            p.relative_to(root)
            for p in (root / directory).rglob("*")
            if p.is_file()
            and not p.name.endswith(".progress.jsonl")
            and p.name != run_lock.LOCK_NAME
        }
    for run_dir in sorted(p for p in runs.glob("*/*") if p.is_dir()):
        files |= {
            (run_dir / name).relative_to(root)
            for name in workspace.RUN_RECORDS
            if (run_dir / name).exists()
        }
        if checkpoints:
            files |= {p.relative_to(root) for p in workspace.checkpoints_dir(run_dir).glob("*")}
    # replication attestations received (verify --attest): signed statements, shipped as is
    for pattern in ("*.intoto.json*", "spot-checks/*.intoto.json*"):  # attestation's folders
        files |= {p.relative_to(root) for p in (root / ATTESTATIONS).glob(pattern)}
    for name in ("ranker/ranker.json", "ranker/ranker.safetensors"):
        if (root / name).exists():
            files.add(Path(name))
    return sorted(f for f in files if (root / f).is_file())


def write(root: Path, out: Path, checkpoints: bool, sign: Path | None = None) -> dict:
    """The archive, and beside it the CITATION.cff and ro-crate-metadata.json it holds
    (what an archive such as Zenodo reads from an upload) and its own SHA-256 (OUT.sha256,
    sha256sum's format). With `sign` (an OpenSSH private key), the manifest is signed and
    the key's public half shipped (report.signing)."""
    root, out = Path(root), Path(out)
    if out.is_dir():
        raise InputError(f"--out {out}: a directory; give the archive's path (e.g. {out}/x.tar.gz)")
    files = collect(root, checkpoints)
    contents: dict[str, bytes | None] = {f.as_posix(): None for f in files}  # None: on disk
    contents.update(code_files(root, lock.NAME in contents))
    contents.update(safe_pipelines(root, contents))
    for stale in (workspace.SIGNATURE, workspace.SIGNER):  # a workspace's: never its signature
        contents.pop(stale, None)
    if sign is not None:
        contents[workspace.SIGNER] = signing.public_key(sign)  # who signs, itself signed
    contents[readme.NAME] = page(root, contents, sign is not None).encode()
    # each file read for its hash once: the manifest and the crate share them (checkpoints
    # and resume points run to gigabytes)
    hashes = {name: _sha256(root, name, data) for name, data in contents.items()}
    described = metadata(root, contents, hashes)
    contents.update(described)
    hashes.update({name: sha256_bytes(data) for name, data in described.items()})
    manifest = contents[MANIFEST] = manifest_text(hashes).encode()
    if sign is not None:
        contents[workspace.SIGNATURE] = signing.sign(manifest, sign)
    try:
        _write_archive(root, out, contents)
        for name in METADATA:
            with atomic_open(out.parent / name, "wb") as handle:
                handle.write(contents[name])
        digest = sha256_file(out)
        with atomic_open(out.with_name(out.name + ".sha256"), "w") as handle:
            handle.write(f"{digest}  {out.name}\n")
    except OSError as error:  # a study file's is its own (_write_archive)
        raise InputError(f"--out {out}: cannot write there ({error.strerror})") from None
    size, hashed = out.stat().st_size, lock.shipped_hashed(root, contents)
    return {"files": len(contents), "bytes": size, "sha256": digest, "lock_hashed": hashed}


def page(root: Path, contents: dict[str, bytes | None], signed: bool) -> str:
    """REPLICATE.md for these contents: the wheel by its path and SHA-256 (its install
    line requires that hash), signed or not, a checkout's commit."""
    checkout = is_checkout(root)
    wheel_path = next(name for name in sorted(contents) if name.startswith(f"{wheel.WHEEL_DIR}/"))
    shipped = readme.Shipped(
        wheel=wheel_path,
        wheel_sha256=_sha256(root, wheel_path, contents[wheel_path]),
        signed=signed,
        lock_hashed=lock.shipped_hashed(root, contents),
        commit=provenance.git_info(root).get("commit") if checkout else None,
    )
    return readme.text(root, checkout, shipped)


def shipped_page(directory: Path) -> str:
    """REPLICATE.md as an unpacked bundle's files give it (verify BUNDLE's page link): the
    wheel it holds, its signature, a checkout's commit from its CITATION.cff."""
    import yaml

    directory = Path(directory)
    wheels = sorted((directory / wheel.WHEEL_DIR).glob("*.whl"))
    if not wheels:
        raise InputError(f"{directory / wheel.WHEEL_DIR}: no wheel in the bundle")
    checkout = is_checkout(directory)
    try:
        cff = yaml.safe_load((directory / "CITATION.cff").read_text())
    except (OSError, yaml.YAMLError):
        cff = {}
    shipped = readme.Shipped(
        wheel=f"{wheel.WHEEL_DIR}/{wheels[0].name}",
        wheel_sha256=sha256_file(wheels[0]),
        signed=(directory / workspace.SIGNATURE).exists(),
        lock_hashed=lock.shipped_hashed(directory, {}),
        commit=(cff or {}).get("commit") if checkout else None,
    )
    return readme.text(directory, checkout, shipped)


def _write_archive(root: Path, out: Path, contents: dict[str, bytes | None]) -> None:
    """The tar.gz, streamed file by file (checkpoints and resume points run to gigabytes);
    the manifest last, as sha256sum -c reads it, then its signature."""
    with (
        atomic_open(out, "wb") as handle,
        gzip.GzipFile(fileobj=handle, mode="wb", mtime=0, filename="") as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        last = [name for name in (MANIFEST, workspace.SIGNATURE) if name in contents]
        for name in [*sorted(set(contents) - set(last)), *last]:
            held = contents[name]
            if held is None:
                try:
                    source = open(root / name, "rb")
                except OSError as error:
                    raise InputError(
                        f"{root / name}: {error.strerror} (changed while bundling?)"
                    ) from None
                with source:
                    size = os.fstat(source.fileno()).st_size
                    tar.addfile(_info(f"{ROOT}/{name}", size), source)
            else:
                tar.addfile(_info(f"{ROOT}/{name}", len(held)), io.BytesIO(held))


PIPELINE_FILES = (("dvc.yaml", True), ("start_sequences/dvc.yaml", False))  # (name, root)
DVC_FILES = ((".dvc/config", "dvc-config"), (".dvcignore", "dvcignore"))  # (name, package's)


def safe_pipelines(root: Path, contents: dict[str, bytes | None]) -> dict[str, bytes]:
    """The pipelines as a bundle ships them (core.pipelines.bundle_pipeline: no src/ paths,
    every output kept, so `dvc repro` inside the unpacked bundle deletes nothing and its
    first command says what to run instead), with DVC's config so that DVC runs there."""
    shipped = {
        name: pipelines.bundle_pipeline((root / name).read_text(), is_root).encode()
        for name, is_root in PIPELINE_FILES
        if name in contents
    }
    for name, packaged_name in DVC_FILES:
        if name not in contents:
            shipped[name] = packaged.data_path(packaged_name).read_bytes()
    return shipped


# a reference copy (reference/laptop/) holds the results and what made them, not the code:
# the repository it sits in has that. Its README.md is written by hand and kept.
REFERENCE_PROJECT_FILES = ("params.yaml", "dvc.yaml", "dvc.lock")
REFERENCE_KEPT = ("README.md",)


def reference_files(root: Path) -> list[Path]:
    """The bundle's files less code, checkpoints, resume points and the authors' start
    sequences (the repository ships those)."""
    project = set(PROJECT_FILES) - set(REFERENCE_PROJECT_FILES)
    return [
        f
        for f in collect(root, checkpoints=False)
        if f.parts[0] not in PROJECT_DIRS
        and f.as_posix() not in project
        and f.parts[0] != workspace.RESUME_POINTS.name
        and not (
            f.parts[0] == workspace.START_SEQUENCES.name
            and (f.name.startswith("authors") or f.name == "dvc.yaml")
        )
    ]


def write_reference(root: Path, out: Path) -> dict:
    """The study's results unpacked in `out` with a MANIFEST.sha256 over them, for a
    repository to commit and `verify --reference` to check. The old copy is replaced only
    once the new one is whole."""
    root, out = Path(root), Path(out)
    files = reference_files(root)
    staging, old = out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")
    shutil.rmtree(staging, ignore_errors=True)
    for name in files:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, staging / name)
    (staging / MANIFEST).write_text(
        manifest_text({f.as_posix(): sha256_file(staging / f) for f in files})
    )
    for kept in REFERENCE_KEPT:
        if (out / kept).exists():
            shutil.copyfile(out / kept, staging / kept)
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return {"files": len(files), "bytes": sum((out / f).stat().st_size for f in files)}


INSTALLED_CODE = f"{wheel.CODE_DIR}/reprodqn"  # a workspace's code: the installed package


def code_files(root: Path, lock_shipped: bool) -> dict[str, bytes]:
    """The package as a wheel (report.wheel), so a reader installs it from the archive;
    in a workspace (not a checkout, whose code is its own src/) the wheel's contents too,
    under code/, the code that made its results; and the lock where none is shipped."""
    added = wheel.bundled(root, lock_shipped)
    if is_checkout(root):
        return {name: data for name, data in added.items() if not name.startswith("code/")}
    return added


def metadata(
    root: Path, contents: dict[str, bytes | None], hashes: dict[str, str]
) -> dict[str, bytes]:
    """CITATION.cff and ro-crate-metadata.json for these files (None: on disk under root)
    with their SHA-256 (the crate lists CITATION.cff too; the manifest covers both)."""
    git = provenance.git_info(root)
    cff = citation.citation(root, git.get("commit"), citation.release_date(git)).encode()
    hashes = dict(hashes)
    sizes = {
        name: (root / name).stat().st_size if data is None else len(data)
        for name, data in contents.items()
    }
    hashes["CITATION.cff"], sizes["CITATION.cff"] = sha256_bytes(cff), len(cff)
    import yaml

    crate = citation.crate(hashes, sizes, yaml.safe_load(cff), citation.rom_sha256())
    return {"CITATION.cff": cff, workspace.CRATE: crate.encode()}


def _sha256(root: Path, name: str, data: bytes | None) -> str:
    return sha256_file(root / name) if data is None else sha256_bytes(data)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def read_manifest(directory: Path) -> dict[str, str]:
    """An unpacked bundle's manifest, SHA-256 by name; a line that is not `SHA-256
    relative/path` is one line naming it."""
    manifest = Path(directory) / MANIFEST
    if not manifest.exists():
        raise InputError(f"{manifest}: not found (not an unpacked reprodqn bundle?)")
    listed = {}
    for number, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        if (
            not re.fullmatch(r"[0-9a-f]{64}", digest)
            or not name
            or name.startswith("/")
            or (".." in Path(name).parts)
        ):
            raise InputError(
                f"{manifest}: line {number} is not 'SHA-256  path inside the bundle' (corrupted?)"
            )
        listed[name] = digest
    return listed


# what tools write in an unpacked bundle (Python's caches, `dvc repro`'s refusal): no one's
# claim; every other file is the manifest's, or named
TOOL_LEFTOVERS = ("__pycache__",)
DVC_LEFTOVERS = (".dvc/tmp/", ".dvc/cache/")


def check_manifest(directory: Path, everywhere: bool = False) -> list[str]:
    """Files of an unpacked bundle whose SHA-256 does not match its manifest, then files the
    manifest does not list: anywhere in the bundle (`everywhere`: verify BUNDLE, for which
    one signature vouches for the whole archive), else under the folders verify --reference
    reads (a checkout bundle built in place by pip gains build/ and egg-info there)."""
    directory = Path(directory)
    listed = read_manifest(directory)
    bad = [
        name
        for name, digest in listed.items()
        if not (directory / name).is_file() or sha256_file(directory / name) != digest
    ]
    folders = [directory] if everywhere else [
        directory / folder for folder in (workspace.RUNS, workspace.EVALUATIONS, workspace.RESULTS)
    ]  # fmt: skip
    held = {
        path.relative_to(directory).as_posix()
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file() and not set(TOOL_LEFTOVERS) & set(path.parts)
    }
    held -= {MANIFEST, workspace.SIGNATURE}
    held = {name for name in held if not name.startswith(DVC_LEFTOVERS)}
    return bad + [f"{name} (not in the manifest)" for name in sorted(held - set(listed))]
