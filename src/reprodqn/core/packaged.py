"""What the installed package carries and reads at run time, found with importlib.resources
(never a path computed from __file__ up into a checkout): the default params with their
source comments, the presets, the authors' start states with their licence and the file
they were imported from, and what a new workspace needs (its pipelines, .dvcignore, DVC's
config, CITATION.cff).

In a checkout, reprodqn/data/ holds links to the checkout's own files, which the wheel
copies in when it is built: one copy of each, where a reader of the bundle expects it."""

from __future__ import annotations

import hashlib
import importlib.metadata
from importlib.resources import files
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.errors import InputError

DISTRIBUTION = "reprodqn"
DEFAULT_START_SEQUENCES = "start_sequences/authors.json"  # evaluation.start_sequences' default


def _data(*parts: str) -> Path:
    return Path(str(files("reprodqn").joinpath("data", *parts)))


def data_path(*parts: str) -> Path:
    """A file the package carries, as a path (a wheel installs onto the file system)."""
    path = _data(*parts)
    if not path.exists():
        raise InputError(
            f"{path}: missing from the installed reprodqn (a broken install: reinstall it)"
        )
    return path


def default_params() -> Path:
    """params.yaml as the package ships it: the paper's values, each with its source."""
    return data_path("params.yaml")


def presets_dir() -> Path:
    return data_path("presets")


def authors_start_sequences() -> Path:
    """The authors' 100 start sequences (start_sequences/authors.json, MIT)."""
    return data_path("start_sequences", "authors.json")


def game_start_sequences_name(game: str, root: Path = Path(".")) -> str | None:
    """How params name a game's own start states: the authors' for Breakout; for another,
    start_sequences/GAME.json where the package carries it or the workspace `root` holds
    it (what `reprodqn select --set env.game=GAME` writes there); None where neither has."""
    if game == "breakout":
        return DEFAULT_START_SEQUENCES
    path = workspace.game_start_sequences(game)
    name = path.as_posix()
    return name if _data(*path.parts).is_file() or (Path(root) / path).is_file() else None


def game_start_sequences(game: str) -> Path | None:
    """The package's own copy of a game's start states, None where it carries none."""
    if game == "breakout":
        return authors_start_sequences()
    path = workspace.game_start_sequences(game)
    return data_path(*path.parts) if _data(*path.parts).is_file() else None


def carried_start_sequences() -> list[str]:
    """Every start-sequence file the package carries, as params name them."""
    return sorted(
        f"start_sequences/{path.name}" for path in _data("start_sequences").glob("*.json")
    )


def carries(name: str | Path) -> bool:
    """Whether params name a start-sequence file the package carries (the authors' counted
    even when gone from the install, which then says it is broken)."""
    return Path(name).as_posix() in {DEFAULT_START_SEQUENCES, *carried_start_sequences()}


def start_sequences(name: str | Path) -> Path:
    """A start-sequence file as params, a flag or the env name it, found by the one rule
    every door shares: the file itself if it exists here (a workspace's); else, for a file
    the package carries (the authors' states, or another game's start_sequences/GAME.json),
    the package's copy (evaluating from any directory)."""
    path = Path(name)
    if path.exists() or not carries(path):
        return path
    return data_path(*path.as_posix().split("/"))


def version() -> str:
    """The installed version: pyproject.toml's, read from the package's metadata ("0+unknown"
    for a copy of the source that was never installed)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def package_files() -> dict[str, Path]:
    """Every file of the installed package (its code and its data) by relative path."""
    root = Path(str(files("reprodqn")))
    return {
        path.relative_to(root).as_posix(): path
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def source_digest() -> str:
    """SHA-256 over every file of the installed package (its code and its data, by
    relative path), so a workspace's stages rerun when the package they run changes."""
    digest = hashlib.sha256()
    for name, path in package_files().items():
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
