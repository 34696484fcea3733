"""The study's DVC pipeline in its three forms: a checkout's (each stage depends on the
package modules it imports), a workspace's (`reprodqn init`: one dependency on the
installed package's record stands for them) and a bundle's (the workspace's, every output
kept in place, so `dvc repro` inside an unpacked bundle deletes nothing before its first
command refuses to write there)."""

from __future__ import annotations

import re

from reprodqn.core import packaged, workspace

INSTALLED_RECORD = (workspace.RESULTS / workspace.INSTALLED).as_posix()
SOURCE_DEP = re.compile(r"^(\s+)- src/reprodqn/\S+\.py\n", re.MULTILINE)
INSTALLED_STAGE = f"""\
  installed:  # the reprodqn this workspace runs: always re-read, like the conditions
    cmd: reprodqn installed
    always_changed: true
    outs:
      - {INSTALLED_RECORD}: {{cache: false}}

"""
# an output DVC deletes before it runs the stage's command, unless it persists
UNKEPT_OUT = re.compile(r"^(\s+- [^\s:]+): \{cache: false\}", re.MULTILINE)


def workspace_pipeline(text: str, root: bool) -> str:
    """A checkout's pipeline for an installed package: each stage's run of package-module
    deps becomes one dep on the installed record; the root pipeline gains the stage that
    writes it."""

    def one_dep(match: re.Match) -> str:
        return f"{match.group(1)}- {INSTALLED_RECORD}\n"

    stages = re.split(r"(?m)^(?=  \S)", text)  # the header, then one chunk per stage
    rewritten = [stages[0]] + [_collapse(chunk, one_dep) for chunk in stages[1:]]
    if not root:  # its own header says where it runs and when
        return "".join(rewritten)
    header = (
        f"# The study as a DVC pipeline, made by `reprodqn init` (reprodqn {packaged.version()})"
        ": `dvc repro`\n# runs it from params.yaml with the installed package. Each stage "
        "declares the params\n# and data it uses, and "
        f"{INSTALLED_RECORD} for the package's code, so upgrading\n# reprodqn or changing a "
        "knob reruns only what depends on it.\n\n"
    )
    if not stages[0].rstrip().endswith("stages:"):
        raise ValueError("the package's dvc.yaml must begin with its stages")
    return header + "stages:\n" + INSTALLED_STAGE + "".join(rewritten[1:])


def _collapse(chunk: str, one_dep) -> str:
    """A stage's package-module deps replaced by one dep, where the first of them stood."""
    first = SOURCE_DEP.search(chunk)
    if first is None:
        return chunk
    rest = SOURCE_DEP.sub("", chunk[first.end() :])
    return chunk[: first.start()] + one_dep(first) + rest


BUNDLE_NOTE = (
    "# In a bundle: the pipeline that ran, in the workspace form; every output persists, so\n"
    "# `dvc repro` here deletes nothing, and its first command refuses to write in a bundle.\n"
    "# Replicate in a new workspace beside this folder (REPLICATE.md gives the commands).\n"
)


def bundle_pipeline(text: str, root: bool) -> str:
    """The pipeline a bundle ships: the workspace form (no src/ paths, which a bundle of a
    workspace does not hold), each output kept in place."""
    if SOURCE_DEP.search(text):
        text = workspace_pipeline(text, root)
    return BUNDLE_NOTE + UNKEPT_OUT.sub(r"\1: {cache: false, persist: true}", text)
