"""The bundle: one archive a paper can link to, holding what a reader needs to replicate
the study and to check a replication against it (`reprodqn verify --reference`).

Code, params, the pipeline and its lock, start sequences, conditions and SBOM, every
run's hash chains and records, evaluation results and the report, with a manifest of
SHA-256s; weights only on request. The archive itself is reproducible: sorted entries,
fixed times and owners, so the same files always give the same bytes.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

from reprodqn import workspace
from reprodqn.errors import InputError
from reprodqn.files import atomic_open, sha256_file

PROJECT_FILES = ("README.md", "Makefile", "Dockerfile", ".dockerignore", "pyproject.toml",
                 "requirements.lock", "params.yaml", "params-smoke.yaml", "dvc.yaml",
                 "dvc.lock", ".dvcignore", ".dvc/config", ".gitignore")
PROJECT_DIRS = ("src", "tests", "bench", ".ci")
ROOT = "reprodqn-bundle"


def _tracked(root: Path) -> list[Path]:
    """Git-tracked project files when git knows them, else the project's own layout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                             timeout=20)
        if out.returncode == 0 and out.stdout:
            return [Path(p) for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.TimeoutExpired):
        pass
    files = [Path(f) for f in PROJECT_FILES if (root / f).is_file()]
    for directory in PROJECT_DIRS:
        files += [p.relative_to(root) for p in (root / directory).rglob("*") if p.is_file()
                  and "__pycache__" not in p.parts]
    return files


def collect(root: Path, checkpoints: bool) -> list[Path]:
    root = Path(root)
    runs = root / workspace.RUNS
    if not runs.is_dir():
        raise InputError(f"{runs}: no runs to bundle; run the study first")
    files = set(_tracked(root))
    for directory in workspace.RESULT_DIRS:
        files |= {p.relative_to(root) for p in (root / directory).rglob("*")
                  if p.is_file() and not p.name.endswith(".progress.jsonl")}
    for run_dir in sorted(p for p in runs.glob("*/*") if p.is_dir()):
        files |= {(run_dir / name).relative_to(root) for name in workspace.RUN_RECORDS
                  if (run_dir / name).exists()}
        if checkpoints:
            files |= {p.relative_to(root) for p in (run_dir / "checkpoints").glob("*")}
    for name in ("ranker/ranker.json", "ranker/ranker.safetensors"):
        if (root / name).exists():
            files.add(Path(name))
    return sorted(f for f in files if (root / f).is_file())


def write(root: Path, out: Path, checkpoints: bool) -> dict:
    root, out = Path(root), Path(out)
    files = collect(root, checkpoints)
    manifest = "".join(f"{sha256_file(root / f)}  {f.as_posix()}\n" for f in files)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            data = (root / f).read_bytes()
            tar.addfile(_info(f"{ROOT}/{f.as_posix()}", len(data)), io.BytesIO(data))
        data = manifest.encode()
        tar.addfile(_info(f"{ROOT}/MANIFEST.sha256", len(data)), io.BytesIO(data))
    with atomic_open(out, "wb") as handle, \
            gzip.GzipFile(fileobj=handle, mode="wb", mtime=0, filename="") as gz:
        gz.write(buffer.getvalue())
    return {"files": len(files), "bytes": out.stat().st_size, "sha256": sha256_file(out)}


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def check_manifest(directory: Path) -> list[str]:
    """Files of an unpacked bundle whose SHA-256 does not match its manifest."""
    directory = Path(directory)
    manifest = directory / "MANIFEST.sha256"
    if not manifest.exists():
        raise InputError(f"{manifest}: not found (not an unpacked reprodqn bundle?)")
    bad = []
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        path = directory / name
        if not path.exists() or sha256_file(path) != digest:
            bad.append(name)
    return bad
