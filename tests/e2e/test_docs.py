"""The documentation site: `mkdocs build --strict` passes on the real docs and fails on a
planted broken link, and its home page and the laptop study's page render in headless
Chromium with every image loaded. The README stays a landing page."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

README_MAX_LINES = 200


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    # from the repository root: the snippets (README, CHANGELOG) are read relative to it
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = build(site)
    assert result.returncode == 0, result.stderr
    return site


def test_the_strict_build_fails_on_a_broken_link(site, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with open(docs / "cli.md", "a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(ROOT / h) for h in config["hooks"]])
    planted = tmp_path / "mkdocs.yml"
    planted.write_text(yaml.safe_dump(config))
    result = build(tmp_path / "site", planted)
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr


def test_the_readme_is_a_landing_page_that_links_into_the_manual():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for page in yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]:
        for target in _targets(page):
            if target not in ("index.md", "changelog.md"):
                assert f"(docs/{target})" in readme, f"README does not link docs/{target}"


def _targets(entry) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    (value,) = entry.values()
    return [value] if isinstance(value, str) else [t for e in value for t in _targets(e)]


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize(
    "page, heading, table",
    [
        ("", "reprodqn", "deterministic"),
        ("laptop/", "The paper's study on a laptop", "initialization"),
    ],
)
def test_a_page_renders_with_its_figures(served, driver, page, heading, table):
    driver.get(f"{served}/{page}")
    assert driver.find_element("css selector", "article h1").text.startswith(heading)
    cells = [c.text for c in driver.find_elements("css selector", "article table td")]
    assert table in cells  # the snippet of Table 1 was included, not left as text
    images = driver.find_elements("css selector", "article img")
    assert images
    loaded = driver.execute_script(
        "return arguments[0].map(i => i.complete && i.naturalWidth > 0)", images
    )
    assert all(loaded), [
        i.get_attribute("src") for i, ok in zip(images, loaded, strict=True) if not ok
    ]
    stylesheet = driver.execute_script(
        "return getComputedStyle(document.querySelector('.md-header')).position"
    )
    assert stylesheet == "sticky"  # Material's theme loaded, not bare HTML
