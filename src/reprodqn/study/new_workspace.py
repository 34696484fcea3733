"""`reprodqn init [DIR]`: a study workspace made from the installed package, in which
`dvc repro` and the stage commands run the study with no checkout.

It holds the package's params.yaml (every knob with its source comment), the pipelines
(dvc.yaml and start_sequences/dvc.yaml), the authors' start states with their licence and
the file they were imported from, DVC's config, .dvcignore and CITATION.cff. A checkout's
stages depend on the package modules they import; here the package is installed, so one
record stands for its code in every stage: results/installed.json (its version and a
SHA-256 over its files), rewritten by an always-run `installed` stage, so upgrading the
package reruns what it computes and nothing else changes a stage's inputs."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import packaged
from reprodqn.core.atomic import atomic_open, write_json
from reprodqn.core.errors import InputError
from reprodqn.core.pipelines import INSTALLED_RECORD, workspace_pipeline

# (the package's file, where it goes in the workspace)
COPIED = (
    (("params.yaml",), "params.yaml"),
    (("dvcignore",), ".dvcignore"),
    (("dvc-config",), ".dvc/config"),
    (("CITATION.cff",), "CITATION.cff"),
    (("start_sequences", "authors.json"), "start_sequences/authors.json"),
    (("start_sequences", "authors-LICENSE.md"), "start_sequences/authors-LICENSE.md"),
    (("start_sequences", "authors-initstates.txt"), "start_sequences/authors-initstates.txt"),
    *(  # other games' start states, made by the paper's method: start_sequences/GAME.json
        ((*name.split("/"),), name)
        for name in packaged.carried_start_sequences()
        if name != packaged.DEFAULT_START_SEQUENCES
    ),
)
# named pipeline.yaml in the package: a file called dvc.yaml anywhere in a workspace (its
# copy of src/ included) is a pipeline to DVC
PIPELINES = (
    (("pipeline.yaml",), "dvc.yaml"),
    (("start_sequences", "pipeline.yaml"), "start_sequences/dvc.yaml"),
)


def installed_record() -> dict:
    return {"version": packaged.version(), "source_sha256": packaged.source_digest()}


def init(directory: Path) -> list[str]:
    """Write a workspace into `directory` (made if missing); refuse, writing nothing, if
    any of its files is already there. The files written, relative to it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    targets = [target for _, target in COPIED + PIPELINES]
    present = [t for t in targets if (directory / t).exists()]
    if present:
        raise InputError(
            f"{directory / present[0]}: already there; `reprodqn init` makes a new "
            "workspace and never overwrites one (choose an empty DIR)"
        )
    contents = {target: packaged.data_path(*source).read_bytes() for source, target in COPIED}
    for (source, target), root in zip(PIPELINES, (True, False), strict=True):
        text = packaged.data_path(*source).read_text()
        contents[target] = workspace_pipeline(text, root).encode()
    for target, content in contents.items():  # all read first: a broken install writes none
        (directory / target).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(directory / target, "wb") as handle:
            handle.write(content)
    return targets


def write_installed(root: Path) -> dict:
    record = installed_record()
    write_json(Path(root) / INSTALLED_RECORD, record)
    return record
