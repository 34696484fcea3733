"""The MLflow UI as a reader meets it, in a real browser: `mlflow ui` on 127.0.0.1 over a
store written by reprodqn's own tracking code, opened in headless Chromium (Debian's
`chromium` and `chromium-driver`, driven through Selenium).

It checks what a reader needs: the experiment describes itself and is of the model
training kind, the runs table shows the study run with its group x run runs nested under
it, and the chart view draws the evaluation score. The browser fixtures are in
conftest.py.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import PARAMS, ROOT, TINY, cli_env

GROUPS = ("deterministic", "exploration")
DEADLINE = 90.0  # seconds for the server to answer and for each page state to render


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A study run and group x run runs with evaluation scores, written by the tracking
    code the pipeline uses (a study stage's jobs get the parent through the environment)."""
    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.study import mlflow_store, tracking

    root = tmp_path_factory.mktemp("mlflow-ui")
    saved = dict(os.environ)
    os.environ.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}",
        REPRODQN_MLFLOW_EXPERIMENT="reprodqn-ui",
    )
    try:
        params = load_params(PARAMS, [*TINY, "study.runs_per_group=2"])
        parent = tracking.study_run(params, "f" * 64)
        os.environ[mlflow_store.PARENT_ENV] = parent
        for group in GROUPS:
            for run in range(2):
                tracker = mlflow_store.RunTracker(
                    resolve_run(params, group, run), "f" * 64, {"device_name": "cpu"}
                )
                tracker.log_metrics(
                    [
                        ("eval_mean_score", 1.0 + run + step / 200, step)
                        for step in (0, 200, 400, 600)
                    ]
                )
                tracker.finish()
        tracking.finish_study_run(parent)
        experiment = mlflow_store.experiment_id()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return root, experiment


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_ui_env() -> dict[str, str]:
    """The variables `make ui` sets before `mlflow ui`, so the test serves what users get."""
    recipe = re.search(
        r"^ui:.*?\n\t(?:.*\n\t)*?\s*((?:\w+=\S+\s+)+)mlflow ui",
        (ROOT / "Makefile").read_text(),
        re.M,
    )
    assert recipe, "Makefile: no `mlflow ui` line in the ui target"
    return dict(item.split("=", 1) for item in recipe.group(1).split())


@pytest.fixture(scope="module")
def server(store):
    root, experiment = store
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    process = subprocess.Popen(
        [
            str(mlflow),
            "ui",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=cli_env(**make_ui_env()),
        stdout=subprocess.DEVNULL,
        stderr=open(root / "ui.log", "w"),
    )  # the child holds it
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow ui did not answer: {(root / 'ui.log').read_text()[-500:]}")
            time.sleep(0.2)
        yield base, experiment, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_for(driver, condition, what: str):
    """Poll the page until `condition(driver)` is truthy; fail naming `what` at the deadline."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:  # the table re-renders as data arrives: a row found a moment ago can be gone
        return WebDriverWait(
            driver,
            DEADLINE,
            poll_frequency=0.25,
            ignored_exceptions=[StaleElementReferenceException],
        ).until(condition)
    except TimeoutException:
        pytest.fail(f"the MLflow UI never showed {what}; url {driver.current_url}")


def run_names(driver) -> set[str]:
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, "[col-id='attributes.`Run Name`'] a")
    return {cell.text for cell in cells if cell.text}


def study_row(driver):
    from selenium.webdriver.common.by import By

    return next(
        (
            row
            for row in driver.find_elements(By.CSS_SELECTOR, "[role='row']")
            if "study" in row.text.split("\n")
        ),
        None,
    )


def chart_legend(driver, metric: str) -> set[str]:
    """Runs drawn in the chart card titled `metric` (empty until plotly has drawn lines)."""
    from selenium.webdriver.common.by import By

    titles = driver.find_elements(By.CSS_SELECTOR, f"h4[title='{metric}']")
    traces = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .scatterlayer .trace")
    if not titles or not traces:
        return set()
    suffix = f" ({metric})"
    return {
        span.text[: -len(suffix)]
        for span in driver.find_elements(By.TAG_NAME, "span")
        if span.text.endswith(suffix)
    }


def test_the_experiment_opens_on_nested_runs_and_charts_the_eval_score(server, driver, tmp_path):
    from selenium.webdriver.common.by import By

    base, experiment, _ = server
    started = time.monotonic()
    # the link `make ui` prints: the runs of this experiment, in the model-training view
    from reprodqn.study.mlflow_store import ui_link

    driver.get(ui_link(base, experiment))
    wait_for(driver, lambda d: run_names(d) == {"study"}, "the runs table folded to its study run")
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "5 matching runs" in body  # the four group x run runs are there, folded
    assert "Nagarajan, Warnell & Stone" in body  # the experiment's description
    expander = "button[data-component-id*='runnamecellrenderer']"
    wait_for(driver, study_row, "the study row").find_element(By.CSS_SELECTOR, expander).click()
    children = {f"{g}/{r}" for g in GROUPS for r in range(2)}
    wait_for(
        driver,
        lambda d: run_names(d) == {"study"} | children,
        "the group x run runs unfolded under the study run",
    )

    driver.execute_script(
        "document.querySelector(\"input[name='runs-view-mode'][value='CHART']\").click()"
    )
    drawn = wait_for(
        driver,
        lambda d: (
            children <= chart_legend(d, "eval_mean_score") and chart_legend(d, "eval_mean_score")
        ),
        "the eval_mean_score chart",
    )
    assert drawn - children <= {"study"}
    driver.save_screenshot(str(tmp_path / "mlflow-charts.png"))
    print(f"browser checks took {time.monotonic() - started:.1f}s")


def test_make_ui_starts_no_mlflow_job_workers(server):
    """MLflow's server jobs (a job runner and huey consumers, ~240 MB each) serve GenAI
    features the study never uses; `make ui` turns them off."""
    import psutil

    *_, pid = server
    time.sleep(5)  # MLflow starts its job workers after the server answers
    commands = [" ".join(child.cmdline()) for child in psutil.Process(pid).children(recursive=True)]
    assert commands and not [c for c in commands if "huey" in c or "_job_runner" in c]
