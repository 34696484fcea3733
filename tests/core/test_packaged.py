"""What the package carries: the checkout's own files (links, one copy of each), found with
importlib.resources, and the authors' states standing in for the default file from any
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprodqn.core import packaged
from reprodqn.core.errors import InputError
from tests.helpers import ROOT

DATA = ROOT / "src" / "reprodqn" / "data"


def test_every_data_file_is_a_link_to_the_checkouts_own_file():
    links = [p for p in DATA.rglob("*") if p.is_symlink()]
    targets = {p.relative_to(DATA).as_posix(): p.resolve().relative_to(ROOT).as_posix()
               for p in links}  # fmt: skip
    assert targets["params.yaml"] == "params.yaml"
    assert targets["presets"] == "presets"
    assert targets["start_sequences/authors.json"] == "start_sequences/authors.json"
    assert all(not t.startswith("src/") and (ROOT / t).exists() for t in targets.values())
    files = [p for p in DATA.rglob("*") if p.is_file()]
    assert all(any(f == link or link in f.parents for link in links) for f in files)


def test_the_packages_files_are_found_without_a_checkout_path():
    assert packaged.default_params().read_bytes() == (ROOT / "params.yaml").read_bytes()
    assert {p.name for p in packaged.presets_dir().glob("*.yaml")} == {
        p.name for p in (ROOT / "presets").glob("*.yaml")
    }
    with pytest.raises(InputError, match="missing from the installed reprodqn"):
        packaged.data_path("start_sequences", "nowhere.json")


def test_the_default_start_sequences_come_from_the_package_where_this_directory_has_none(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert packaged.start_sequences(packaged.DEFAULT_START_SEQUENCES) == (
        packaged.authors_start_sequences()
    )
    assert packaged.start_sequences("mine.json") == Path("mine.json")  # never guessed
    # another game's, made by the paper's method, as params name it in a workspace
    assert packaged.start_sequences("start_sequences/pong.json") == (
        packaged.game_start_sequences("pong")
    )
    assert packaged.start_sequences("start_sequences/boxing.json") == Path(
        "start_sequences/boxing.json"
    )  # not carried: its own missing-file error, naming it
    own = tmp_path / packaged.DEFAULT_START_SEQUENCES
    own.parent.mkdir()
    own.write_text("{}")
    assert packaged.start_sequences(packaged.DEFAULT_START_SEQUENCES).resolve() == own


def test_the_version_is_pyprojects_and_the_digest_covers_the_packages_files():
    import tomllib

    import reprodqn

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert reprodqn.__version__ == packaged.version() == declared
    digest = packaged.source_digest()
    assert len(digest) == 64 and digest == packaged.source_digest()


def test_no_package_file_is_named_as_dvc_would_take_it_for_a_pipeline():
    """A dvc.yaml anywhere under a workspace (its copy of src/ included) is a pipeline to
    DVC, which would run the package's copy as stages of its own."""
    assert not [p for p in DATA.rglob("*") if p.name in ("dvc.yaml", "dvc.lock")]
    assert (DATA / "pipeline.yaml").resolve() == ROOT / "dvc.yaml"
