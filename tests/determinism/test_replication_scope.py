"""Where a result replicates, decided from the conditions its runs recorded: a universal
run on any x86-64 or aarch64 CPU and any torch (a GPU not yet claimed), a standard run only
on the stack it names, a mixed study each part, a record naming no mode standard."""

from __future__ import annotations

import copy
import json

from reprodqn.determinism.replication_scope import (
    UNIVERSAL_REACH,
    numerics_of,
    recorded_conditions,
    where_it_replicates,
)

STANDARD = {
    "device": "cpu",
    "device_name": "cpu",
    "gpu": {"present": False},
    "cpu": {"architecture": "x86_64", "torch_cpu_capability": "AVX2"},
    "packages": {"torch": "2.13.0+cpu"},
    "numerics": {"cpu_isa": "avx2", "torch_threads": 1},  # no "numerics": made before it
}
UNIVERSAL = {
    **STANDARD,
    "numerics": {"cpu_isa": "portable", "torch_threads": 2, "numerics": "universal"},
}
STACK = "x86_64 CPU at floor avx2, 1 thread, torch 2.13.0+cpu, no GPU"
NOT_ON_A_GPU = "on an NVIDIA GPU not yet, until gpu-check has shown the same chain there"


def test_a_universal_study_replicates_on_every_cpu_and_not_yet_on_a_gpu():
    sentence = where_it_replicates([UNIVERSAL, UNIVERSAL], "These results")
    assert sentence.startswith("These results are in the universal numerics")
    assert f"bit for bit on {UNIVERSAL_REACH}; {NOT_ON_A_GPU}." in sentence
    assert "any x86-64 or aarch64 CPU and any torch the package supports" in sentence
    assert "stack" not in sentence


def test_a_standard_study_replicates_on_the_stack_it_names():
    assert numerics_of(STANDARD) == "standard" and numerics_of({}) == "standard"
    sentence = where_it_replicates([STANDARD, None])
    assert sentence == (
        "Its results are in the standard numerics: they replicate bit for bit only on the "
        f"stack their conditions name: {STACK}; another CPU floor, thread count, torch or GPU "
        "may part their chains."
    )
    native = copy.deepcopy(STANDARD)
    native["numerics"]["cpu_isa"] = "native"
    native.update(device="cuda:0", device_name="NVIDIA H200")
    native["gpu"] = {"driver": "580.159.04", "cuda": "13.0", "cudnn": 91900}
    both = where_it_replicates([STANDARD, native])
    assert f"(1) {STACK}; (2) x86_64 CPU at floor native (AVX2), 1 thread" in both
    assert "NVIDIA H200 with driver 580.159.04 (CUDA 13.0, cuDNN 91900)" in both


def test_a_mixed_study_says_so_and_a_universal_run_on_a_gpu_is_not_claimed_there():
    mixed = where_it_replicates([UNIVERSAL, STANDARD, STANDARD], "This bundle's results")
    assert mixed.startswith("This bundle's results mix the two numerics. The 1 universal run ")
    assert f"replicates bit for bit on {UNIVERSAL_REACH}; {NOT_ON_A_GPU}." in mixed
    assert f"The 2 standard runs replicate only on the stack their conditions name: {STACK};" in (
        mixed
    )
    on_gpu = {**UNIVERSAL, "device": "cuda:0", "device_name": "NVIDIA H200"}
    assert "trained on NVIDIA H200, where the universal chain is not yet shown" in (
        where_it_replicates([on_gpu])
    )
    assert "not known" in where_it_replicates([None], "These results")


def test_a_bundles_runs_give_their_conditions_else_the_studys(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "conditions.json").write_text(json.dumps(STANDARD))
    assert recorded_conditions(tmp_path) == [STANDARD]
    for run in (0, 1):
        (tmp_path / "runs" / "deterministic" / str(run)).mkdir(parents=True)
        path = tmp_path / "runs" / "deterministic" / str(run) / "conditions.json"
        path.write_text(json.dumps(UNIVERSAL))
    assert recorded_conditions(tmp_path) == [UNIVERSAL, UNIVERSAL]


def test_verify_of_two_result_folders_says_where_the_references_results_replicate(tmp_path):
    """`verify A B` of any script's result folders ends with the sentence for B's runs,
    from the conditions.json each run folder holds."""
    from reprodqn.forensics import chains
    from tests.exact.test_api import _chain

    for side in ("ours", "reference"):
        for run in ("seed-0", "seed-1"):
            _chain(tmp_path / side / run, [1.0, 2.0])
    recorded = tmp_path / "reference" / "seed-0" / "conditions.json"
    unknown = chains.summary(chains.compare(tmp_path / "ours", tmp_path / "reference"))
    assert unknown.splitlines()[-1] == (
        "Where the reference's results replicate is not known: no run recorded its conditions."
    )
    recorded.write_text(json.dumps(UNIVERSAL))
    universal = chains.summary(chains.compare(tmp_path / "ours", tmp_path / "reference"))
    assert universal.splitlines()[0].startswith("verify: identical")
    assert universal.splitlines()[-1] == where_it_replicates([UNIVERSAL], "The reference's results")
    assert UNIVERSAL_REACH in universal.splitlines()[-1]
    (tmp_path / "reference" / "seed-1" / "conditions.json").write_text(json.dumps(STANDARD))
    mixed = chains.summary(chains.compare(tmp_path / "ours", tmp_path / "reference"))
    assert mixed.splitlines()[-1].startswith("The reference's results mix the two numerics.")


def test_verify_of_one_run_rerun_here_says_where_that_runs_results_replicate(tmp_path):
    """`verify RUN --until STEP` (a script's run rerun here) ends with the sentence for
    that run, from its own conditions.json."""
    from reprodqn.forensics import script_rerun
    from tests.exact.test_api import SCRIPT, script_run

    run, _ = script_run(tmp_path, SCRIPT)
    unknown = script_rerun.rerun_summary(script_rerun.rerun(run, 2, tmp_path / "a"))
    assert unknown.splitlines()[0].startswith("verify: identical")
    assert unknown.splitlines()[-1] == (
        "Where this run's results replicate is not known: no run recorded its conditions."
    )
    (run / "conditions.json").write_text(json.dumps(UNIVERSAL))
    universal = script_rerun.rerun_summary(script_rerun.rerun(run, 2, tmp_path / "b"))
    assert universal.splitlines()[-1] == where_it_replicates([UNIVERSAL], "This run's results")
    assert UNIVERSAL_REACH in universal.splitlines()[-1]
