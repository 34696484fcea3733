"""Table 1, variance tests, the replicability verdict and figures, on small synthetic
studies whose answers are known (verify: tests/forensics/test_verify.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from reprodqn.core.errors import InputError
from reprodqn.report import analysis, sections, writer
from tests.helpers import fake_run, fake_study


def test_table1_is_best_and_final_over_runs_like_the_paper():
    table = analysis.table1(fake_study())
    best = [5, 7, 9]  # exploration: each run's highest checkpoint score
    final = [5, 6, 4]
    assert table["best_mean"]["exploration"] == pytest.approx(np.mean(best))
    assert table["best_std"]["exploration"] == pytest.approx(np.std(best))
    assert table["best_rsd"]["exploration"] == pytest.approx(100 * np.std(best) / np.mean(best))
    assert table["final_mean"]["exploration"] == pytest.approx(np.mean(final))
    assert table["final_std"]["deterministic"] == 0.0 and table["best_rsd"]["gpu"] == 0.0
    markdown = sections.table1_markdown(table)
    assert "| Average score (best) | 5.00 (146.70) |" in markdown
    assert "minibatch" in markdown.splitlines()[0]


def test_runs_that_scored_alike_have_a_std_of_exactly_zero():
    # numpy's float mean of three 6.4s is 6.400000000000001: a std of 8.9e-16, no bold zero,
    # and an F-test of 0.0 instead of "one variance is zero" (the laptop reference's scores)
    runs = [fake_run("deterministic", r, [4.09, 5.0, 6.4]) for r in range(3)]
    runs += [fake_run("gpu", r, [4.09, 5.0, score]) for r, score in enumerate([8.15, 7.31, 10])]
    study = {"deterministic": runs[:3], "gpu": runs[3:]}
    table = analysis.table1(study)
    assert table["best_mean"]["deterministic"] == runs[0].best == 6.4
    assert table["best_std"]["deterministic"] == 0.0 == table["final_rsd"]["deterministic"]
    zero = analysis.variance_tests(study)[0]
    assert zero["f_statistic"] == math.inf and "one variance is zero" in zero["note"]


def test_variance_tests_match_scipy_and_handle_zero_variance():
    tests = analysis.variance_tests(fake_study())
    pair = next(
        t
        for t in tests
        if t["scores"] == "final" and t["groups"] == ["exploration", "initialization"]
    )
    x, y = np.array([5.0, 6, 4]), np.array([1.0, 9, 2])
    f = x.var(ddof=1) / y.var(ddof=1)
    p = 2 * min(stats.f.cdf(f, 2, 2), stats.f.sf(f, 2, 2))
    assert pair["f_statistic"] == pytest.approx(f) and pair["f_p"] == pytest.approx(p)
    assert pair["bf_p"] == pytest.approx(stats.levene(x, y, center="median").pvalue)
    both_zero = next(t for t in tests if t["groups"] == ["deterministic", "gpu"])
    assert both_zero["f_p"] is None and "both variances are zero" in both_zero["note"]
    one_zero = next(
        t
        for t in tests
        if t["groups"] == ["deterministic", "environment"] and t["scores"] == "final"
    )
    assert one_zero["f_statistic"] == math.inf and one_zero["significant"]
    assert len(tests) == 2 * 15  # every pair of the six groups, best and final


def test_verdict_names_the_first_diverging_run_and_checkpoint():
    identical = analysis.verdict(fake_study())
    assert identical["replicable"] is True
    assert all(identical[k]["identical"] for k in ("weights", "losses", "evaluation"))
    runs = [
        fake_run("deterministic", 0, [1, 5, 3]),
        fake_run("deterministic", 1, [1, 5, 3]),
        fake_run("deterministic", 2, [1, 5, 4], chains=["w0", "w100", "DIFFERENT"]),
    ]
    verdict = analysis.verdict(fake_study(runs))
    assert verdict["replicable"] is False
    assert verdict["weights"]["first_divergence"] == {"run": 2, "step": 200}
    assert verdict["evaluation"]["first_divergence"] == {"run": 2, "step": 200}


def test_cpu_study_says_the_gpu_group_has_no_gpu_nondeterminism():
    statement = analysis.device_statement(fake_study())
    assert not statement["on_gpu"] and statement["gpu_group_equals_deterministic"]
    assert "no GPU nondeterminism to show" in statement["text"]


def test_write_report_produces_every_output(tmp_path):
    summary = writer.write_report(fake_study(), tmp_path, scale_note="Reduced scale.")
    for name in (
        "table1.csv",
        "table1.md",
        "report.md",
        "metrics.json",
        "variance_tests.json",
        "replicability.json",
        "learning_curves.csv",
        "learning_curves_runs.csv",
        "figure1.png",
        "figure1.pdf",
        "figure2_start_state.png",
        "figure4_start_states.pdf",
        "report.html",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    assert summary["metrics"]["replicable"] is True
    text = (tmp_path / "report.md").read_text()
    assert "Verdict: **replicable**" in text and "Reduced scale." in text
    assert "F-test" in text and "Brown-Forsythe" in text
    curves = (tmp_path / "learning_curves.csv").read_text().splitlines()
    assert curves[0] == "step,deterministic,gpu,environment,exploration,initialization,minibatch"
    assert curves[2].startswith("100,5.0,5.0,4.0,7.0,5.0,")


def test_a_study_without_the_gpu_group_names_its_departures_and_the_tests_power(tmp_path):
    from reprodqn.config.explain import departures
    from reprodqn.config.params import load_params
    from tests.helpers import PARAMS

    params = load_params(
        PARAMS, ["study.runs_per_group=2", "study.left_out=[gpu]", "agent.update_every=2"]
    )
    study = {g: runs[:2] for g, runs in fake_study().items() if g != "gpu"}
    summary = writer.write_report(study, tmp_path, departures=departures(params))
    text = (tmp_path / "report.md").read_text()
    assert "| `agent.update_every` | 2 | 4 | Agent steps between updates. |" in text
    assert "| `study.runs_per_group` | 2 | 5 |" in text
    assert "The gpu group is left out" in text and "and left the gpu group out." in text
    # F(1, 1) at alpha 0.1, two-sided: 161.4 (tables); F(4, 4): 6.39
    assert "more than 161.4x the other (the paper's 5 runs: 6.4x)" in text
    assert "gpu" not in summary["metrics"]["table1"]
    tests = json.loads((tmp_path / "variance_tests.json").read_text())
    assert all(t["bf_p"] is None for t in tests)  # degenerate at 2 runs: not computed
    assert "Brown-Forsythe needs 3 runs per group" in text
    assert " | - (141.90) | " in (tmp_path / "table1.md").read_text()  # gpu: the paper only
    writer.write_report(fake_study(), tmp_path / "paper")
    assert "Departures from the paper" not in (tmp_path / "paper" / "report.md").read_text()


def test_report_quotes_the_nondeterminism_audit(tmp_path):
    audit = {
        "summary": "audit: 44 aten overloads ran; global RNGs drawn from: none",
        "conditions_fingerprint": "abcdef1234567890",
    }
    writer.write_report(fake_study(), tmp_path, audit=audit)
    text = (tmp_path / "report.md").read_text()
    assert "### Nondeterminism audit" in text and "44 aten overloads ran" in text
    assert "`abcdef123456`" in text
    writer.write_report(fake_study(), tmp_path / "none")
    assert "Nondeterminism audit" not in (tmp_path / "none" / "report.md").read_text()


def test_report_shows_its_figures_inline_and_as_one_self_contained_page(tmp_path):
    import base64
    import re

    studied = fake_study()
    for runs in studied.values():
        for r in runs:
            r.conditions = {
                "fingerprint": "ab" * 32,
                "device_name": "cpu",
                "cpu": {"model": "Test CPU"},
                "packages": {"torch": "2.13.0"},
                "numerics": {"cpu_isa": "avx2", "torch_threads": 1},
            }
    writer.write_report(studied, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert set(linked) == {
        "figure1.png",
        "figure2_start_state.png",
        "figure4_start_states.png",
        "figure_divergence.png",
        "figure_probe.png",
    }
    assert all((tmp_path / name).exists() for name in linked)  # relative links that resolve
    assert "| `abababababab` | cpu | Test CPU | avx2, 1 |" in markdown  # the conditions
    page = (tmp_path / "report.html").read_text()
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) == len(linked)
    for source, name in zip(sources, linked, strict=True):  # embedded, byte for byte
        assert (
            source
            == "data:image/png;base64," + base64.b64encode((tmp_path / name).read_bytes()).decode()
        )
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing fetched from elsewhere
    assert "<td>Average score (best)</td><td>5.00 (146.70)</td>" in page.replace("\n", "")
    for heading in (
        "Table 1",
        "Where each source of nondeterminism enters",
        "Replicability (after Chen et al.)",
        "Equality of variances between groups",
        "Conditions",
    ):
        assert f">{heading}</h2>" in page, heading
    assert "Verdict: <strong>replicable</strong>" in page and "Test CPU" in page


def test_a_missing_figure_is_one_line_naming_it(tmp_path):
    from reprodqn.report import html

    with pytest.raises(InputError, match=r"figure1\.png: figure linked from the report"):
        html.render("# R\n\n![F](figure1.png)\n", tmp_path)


def test_isa_setting_names_the_floor_and_the_machine():
    pinned = {
        "numerics": {"cpu_isa": "avx2"},
        "cpu": {"isa_flags": ["avx2", "avx512f"], "torch_cpu_capability": "AVX2"},
    }
    assert analysis.isa_setting(pinned) == (
        "pinned to avx2 (machine offers avx512, torch used AVX2)"
    )
    assert analysis.isa_setting(None).startswith("unknown")


@pytest.mark.parametrize(
    "device, numerics, drawn",
    [("cpu", "standard", True), ("cuda:0", "universal", True), ("cuda:0", "standard", False)],
)
def test_the_gpu_groups_drawn_row_order_is_said_where_it_ran(device, numerics, drawn):
    """The gpu group's row order is drawn on a CPU and, in the universal numerics (whose
    kernels are deterministic on a GPU too), on a GPU; in the standard numerics a GPU's own
    kernels stand. The report says which, and labels the group so."""
    from reprodqn.config.study import GPU_ON_CPU, GPU_UNIVERSAL, group_label
    from reprodqn.determinism.provenance import row_order_drawn

    device_type = device.split(":")[0]
    assert row_order_drawn("random", device_type, numerics) is drawn
    assert not row_order_drawn("fixed", device_type, numerics)
    study = fake_study()
    name = "cpu" if device_type == "cpu" else "NVIDIA H200"
    for run in study["gpu"]:
        order = "random" if device_type == "cpu" or numerics == "universal" else "the GPU kernels'"
        numbers = {"cpu_reduction_order": order}
        if numerics == "universal":
            numbers["numerics"] = "universal"
        run.conditions = {"device": device, "device_name": name, "numerics": numbers}
    statement = analysis.device_statement(study)
    assert statement["gpu_emulated_on_cpu"] is drawn
    assert all(analysis.differs_by_design(run) is drawn for run in study["gpu"])
    label = group_label("gpu", device_type, "random", numerics)
    if not drawn:
        assert label == "gpu" and "allowed nondeterministic GPU operations" in statement["text"]
    elif device_type == "cpu":
        assert label == GPU_ON_CPU == statement["group_labels"]["gpu"]
    else:
        assert label == GPU_UNIVERSAL == statement["group_labels"]["gpu"]
        assert "in the universal numerics" in statement["text"]
        assert "order drawn from OS entropy" in statement["text"]
