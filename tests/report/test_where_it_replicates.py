"""REPLICATE.md and the report each say where the study's results replicate, from the
conditions its runs recorded: a universal study on any x86-64 or aarch64 CPU and any torch
(a GPU not yet), a standard one only on the stack it names."""

from __future__ import annotations

import json

import pytest

from reprodqn.report import bundle, writer
from tests.determinism.test_replication_scope import NOT_ON_A_GPU, STACK, STANDARD, UNIVERSAL
from tests.helpers import fake_study

SAID = {
    "universal": "are in the universal numerics, one chain on every machine: they replicate "
    "bit for bit on any x86-64 or aarch64 CPU and any torch the package supports; "
    f"{NOT_ON_A_GPU}.",
    "standard": "are in the standard numerics: they replicate bit for bit only on the stack "
    f"their conditions name: {STACK};",
}
RECORDED = {"universal": UNIVERSAL, "standard": STANDARD}


@pytest.mark.parametrize("numerics", sorted(SAID))
def test_replicate_md_says_where_the_bundle_replicates(tmp_path, numerics):
    """The page a bundle ships (as verify BUNDLE's page link rebuilds it)."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "reprodqn-1.0.0-py3-none-any.whl").write_bytes(b"wheel")
    for run in (0, 1):
        run_dir = tmp_path / "runs" / "deterministic" / str(run)
        run_dir.mkdir(parents=True)
        (run_dir / "conditions.json").write_text(json.dumps(RECORDED[numerics]))
    page = " ".join(bundle.shipped_page(tmp_path).split())
    assert f"**Where it replicates.** This bundle's results {SAID[numerics]}" in page
    other = SAID["standard" if numerics == "universal" else "universal"]
    assert other not in page


@pytest.mark.parametrize("numerics", sorted(SAID))
def test_the_report_says_where_the_study_replicates(numerics):
    study = fake_study()
    for runs in study.values():
        for run in runs:
            run.conditions = RECORDED[numerics]
    markdown = writer.report_texts(study)["report.md"]
    assert f"**Where it replicates.** These results {SAID[numerics]}" in markdown
    other = "universal" if numerics == "standard" else "standard"
    study["gpu"][0].conditions = RECORDED[other]
    mixed = writer.report_texts(study)["report.md"]
    assert "These results mix the two numerics. The " in mixed
    assert f"The 1 {other} run replicates" in mixed and f"The 17 {numerics} runs" in mixed
