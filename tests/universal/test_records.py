"""How the universal mode is named, refused and kept apart: the digest and fingerprint leave
out where a run computes, chains of different modes are never compared, what the mode does
not cover is refused in one line, and no torch float op runs inside it."""

from __future__ import annotations

import pytest
import torch

from reprodqn.config.params import RunConfig, load_params, resolve_run
from reprodqn.core.errors import InputError
from reprodqn.determinism.provenance import fingerprint_fields
from reprodqn.forensics import chains
from reprodqn.universal import api as universal
from tests.helpers import PARAMS

UNIVERSAL = ["compute.numerics=universal", "env.resize=linear_exact"]
STANDARD = ["compute.numerics=standard"]


def run_digest(*overrides: str) -> str:
    return resolve_run(load_params(PARAMS, list(overrides)), "deterministic", 0).digest()


def test_where_a_universal_run_computes_is_left_out_of_its_digest():
    where = ["compute.threads=2", "compute.cpu_isa=native", "compute.device=cpu"]
    assert run_digest(*UNIVERSAL) == run_digest(*UNIVERSAL, *where)
    # the standard mode keeps them
    assert run_digest(*STANDARD) != run_digest(*STANDARD, "compute.threads=2")
    assert run_digest(*UNIVERSAL) != run_digest(*STANDARD, "env.resize=linear_exact")
    assert run_digest() == run_digest("compute.numerics=universal")  # the default


def test_the_standard_mode_leaves_every_digest_as_it_was():
    """compute.numerics at standard, the value runs recorded before it had, is left out of
    the digest, as fields added before it were; universal, the default now, is in it."""
    config = resolve_run(load_params(PARAMS, STANDARD), "deterministic", 0)
    recorded = config.model_dump(mode="json")
    del recorded["compute"]["numerics"]
    assert config.digest() == RunConfig.from_record(recorded).digest()
    assert config.digest() != run_digest()


def test_a_universal_fingerprint_leaves_out_torch_and_the_cpu():
    conditions = {
        "numerics": {"numerics": "universal", "numerics_spec": "1"},
        "packages": {"torch": "2.13.0", "ale-py": "0.12.1", "opencv-python-headless": "4.12"},
    }
    other = {**conditions, "packages": {**conditions["packages"], "torch": "2.11.0"}}
    assert fingerprint_fields(conditions) == fingerprint_fields(other)
    assert "torch" not in fingerprint_fields(conditions)["packages"]


@pytest.mark.parametrize(
    "overrides,named",
    [
        (["replay.prioritized=true", "priority.eta=0.9"], r"priority.eta: 0 \(R2D2's"),
        (["compute.replay_on_device=true"], "compute.replay_on_device: false"),
    ],
)
def test_what_the_mode_does_not_cover_is_refused_in_one_line(overrides, named):
    with pytest.raises(InputError, match=f"compute.numerics: universal needs {named}"):
        load_params(PARAMS, [*UNIVERSAL, *overrides])
    load_params(PARAMS, ["compute.numerics=universal"])  # the authors' resize: reprodqn's


def test_a_cuda_device_is_the_gpu_backends_and_keeps_the_digest():
    """The universal mode runs on a CUDA device (the Triton kernels): the config is accepted
    and its digest is the CPU's, so a GPU's chain is checked against a CPU's."""
    assert run_digest(*UNIVERSAL, "compute.device=cuda") == run_digest(*UNIVERSAL)
    assert run_digest(*STANDARD, "compute.device=cuda") != run_digest(*STANDARD)  # standard's


def test_chains_of_different_numerics_are_never_compared():
    standard = [{"step": 0, "weights_sha256": "a", "loss_chain_sha256": "0"}]
    marked = [{**standard[0], "numerics": "universal", "numerics_spec": "1"}]
    assert chains.first_difference(marked, [dict(line) for line in marked]) is None
    with pytest.raises(InputError, match=r"ours standard, reference universal \(spec 1\)"):
        chains.first_difference(standard, marked)
    later = [{**marked[0], "numerics_spec": "2"}]
    with pytest.raises(InputError, match="spec 1.*spec 2"):
        chains.first_difference(marked, later)


def test_a_torch_float_op_inside_strict_is_refused_naming_it():
    layer = universal.Linear(3, 2)
    x = torch.ones(1, 3)
    with universal.strict():
        layer(x)  # the universal kernels: allowed
        x[0, 1]  # moving and indexing: allowed
        with pytest.raises(universal.NumericsError, match=r"aten\.tanh"):
            torch.tanh(x)
        with pytest.raises(universal.NumericsError, match="float64"):
            x.double()
    torch.tanh(x)  # outside, torch is torch


@pytest.mark.parametrize(
    "make",
    [
        lambda g, i: torch.randn(4, generator=g),
        lambda g, i: torch.rand(4, generator=g),
        lambda g, i: torch.empty(3).normal_(generator=g),
        lambda g, i: torch.linspace(0, 1, 5),
        lambda g, i: torch.arange(0, 1, 0.1),
        lambda g, i: torch.exp(i),
        lambda g, i: torch.sin(i),
        lambda g, i: i / 3,
    ],
    ids=["randn", "rand", "normal_", "linspace", "arange-float-step", "exp", "sin", "true-div"],
)
def test_a_float_made_from_no_float_inside_strict_is_refused(make):
    """The watch judges an op by its outputs too: torch's random float factories (whose
    bits differ by CPU capability and torch version) and floats made from integers are
    refused, the random ones naming the integer-stream way."""
    generator, integers = torch.Generator().manual_seed(0), torch.arange(6)
    with universal.strict():
        with pytest.raises(universal.NumericsError, match="torch's aten") as refused:
            make(generator, integers)
    if "draws floats" in str(refused.value):
        assert "torch.randint" in str(refused.value)
    make(generator, integers)  # outside, torch is torch


def test_exact_values_made_inside_strict_pass():
    """Integer arithmetic, integer ranges (exact in a float), integer draws and constants."""
    generator, integers = torch.Generator().manual_seed(0), torch.arange(6)
    with universal.strict():
        assert torch.arange(5, dtype=torch.float32).tolist() == [0, 1, 2, 3, 4]
        assert (integers * 3 // 2).dtype == torch.int64
        torch.randint(0, 10, (3,), generator=generator)
        assert torch.full((2,), 1.5).tolist() == [1.5, 1.5] and torch.zeros(2).tolist() == [0, 0]


def test_a_torch_layer_in_a_universal_network_is_refused():
    with pytest.raises(universal.NumericsError, match="0 is torch's"):
        universal.check_supported(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 2)))


def test_a_script_set_up_in_the_universal_numerics_records_them(tmp_path):
    """exact.setup(numerics="universal"): the conditions and the chain name the mode, so a
    resume in the other mode is refused and verify never compares the two."""
    import json
    import subprocess
    import sys

    from tests.helpers import ROOT

    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "from reprodqn import exact\n"
        "process = exact.setup(threads=1, numerics='universal')\n"
        "conditions = exact.start_run(sys.argv[1], {'seed': 1}, process)\n"
        "print(conditions['numerics']['numerics'], process.applied['universal_backend'][:4])\n"
    )
    env = {"PYTHONPATH": f"{ROOT / 'src'}", "PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr[-1500:]
    assert shown.stdout.split() == ["universal", "cpu:"]
    recorded = json.loads((tmp_path / "run" / "conditions.json").read_text())
    assert recorded["numerics"]["numerics_spec"] == universal.SPEC_VERSION
    bad = subprocess.run(
        [sys.executable, "-c", "from reprodqn import exact; exact.setup(numerics='fast')"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "numerics: 'fast'; expected standard or universal" in bad.stderr
