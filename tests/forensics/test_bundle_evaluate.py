"""`reprodqn verify BUNDLE --evaluate K`: episodes played again from the checkpoints a bundle
ships, each against its eval.csv row. The bundle is test_bundle_check's (the smoke study
with three step-0/1000 checkpoints: 15 eval.csv rows of shipped checkpoints). A tamperer
who edits a score and rebuilds the report and the manifest passes every other link; the
replayed episode names it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from reprodqn.forensics import bundle_check, bundle_replay
from reprodqn.report import bundle
from tests.forensics.test_bundle_check import SMOKE, rebuild_report, rewrite_manifest
from tests.forensics.test_bundle_check import smoke_bundle as smoke_bundle  # the fixture
from tests.helpers import ROOT, cli_env


@pytest.fixture
def copy(smoke_bundle, tmp_path) -> Path:
    return shutil.copytree(smoke_bundle, tmp_path / bundle.ROOT)


def verify(*arguments) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "reprodqn.cli", "verify", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, env=cli_env())


def test_evenly_spaced_picks_the_same_items_from_the_first():
    assert bundle_replay.evenly_spaced(list(range(15)), 4) == [0, 3, 7, 11]
    assert bundle_replay.evenly_spaced([1, 2], 5) == [1, 2]


def test_the_sampled_episodes_replayed_from_shipped_checkpoints_give_their_rows(smoke_bundle):
    result = bundle_check.check(smoke_bundle, evaluate=4)
    assert result["ok"], result["failed"]
    assert result["held"][-1] == (
        "evaluate: 4 episodes evenly spaced over the 15 eval.csv rows of shipped checkpoints "
        "(deterministic/0 step 0 episodes 0, 3; deterministic/0 step 1000 episode 2; "
        "initialization/1 step 0 episode 1) replayed, each gives its row"
    )
    assert not any(line.startswith("evaluate") for line in bundle_check.check(smoke_bundle)["held"])


def test_a_score_edited_with_its_report_and_manifest_is_named_by_the_episode_replayed(copy):
    path = copy / "evaluations/deterministic/0/eval.csv"
    lines = path.read_text().splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if line.startswith("1000,2,"))
    fields = lines[row].split(",")
    fields[4] = str(int(fields[4]) + 7)
    lines[row] = ",".join(fields)
    path.write_text("".join(lines))
    rebuild_report(copy)
    rewrite_manifest(copy)
    assert bundle_check.check(copy)["ok"]  # every link that plays nothing holds
    result = bundle_check.check(copy, evaluate=4)
    assert not result["ok"]
    assert bundle_check.summary(result) == (
        "verify: BROKEN: evaluate: deterministic/0 checkpoint step 1000 episode 2 plays "
        "otherwise than evaluations/deterministic/0/eval.csv "
        f"(score played {int(fields[4]) - 7}, eval.csv {fields[4]})"
    )
    done = verify(copy, "--evaluate", 4)
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr
    assert done.stdout.count("\n") == 1 and "episode 2 plays otherwise" in done.stdout


@pytest.fixture(scope="module")
def no_checkpoints(tmp_path_factory) -> Path:
    """The smoke study bundled as it is by default: no checkpoints."""
    base = tmp_path_factory.mktemp("plain")
    study = shutil.copytree(SMOKE, base / "study", ignore=shutil.ignore_patterns(bundle.MANIFEST))
    shutil.copy(ROOT / "CITATION.cff", study / "CITATION.cff")
    bundle.write(study, base / "bundle.tar.gz", checkpoints=False)
    with tarfile.open(base / "bundle.tar.gz") as tar:
        tar.extractall(base / "unpacked", filter="data")
    return base / "unpacked" / bundle.ROOT


def test_without_shipped_checkpoints_evaluate_says_so_in_one_line(no_checkpoints):
    done = verify(no_checkpoints, "--evaluate", 3)
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "evaluate:" in line]
    assert said == [f"  evaluate: {bundle_replay.NOTHING_SHIPPED}"]


def test_evaluate_is_only_for_one_bundle(no_checkpoints, tmp_path):
    done = verify("--reference", no_checkpoints, "--evaluate", 3)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        "verify --evaluate: only with one unpacked bundle (verify BUNDLE)"
    )
    assert done.stderr.count("\n") == 1
