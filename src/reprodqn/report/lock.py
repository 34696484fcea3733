"""The lock a workspace's bundle ships: what the study needs to run and replicate, no more.

reprodqn's runtime dependencies and its study extra (the pipeline, the report, the bundle
check), followed through each installed distribution's own requirements, at the versions
installed here; never the rest of the environment (test and lint tools, notebooks). Each
pin carries the SHA-256 of every file its release has on the package index (pip's
`--require-hashes` format, as `pip-compile --generate-hashes` writes it), read once from the
index's simple API and cached. torch is not pinned here (REPLICATE.md installs it first, by
its own index): its build is named in the header. Without the index (offline, or a release
it lacks) the lock says why in its header and carries no hash at all, as pip's hash mode
is all or nothing; REPLICATE.md then installs it by version."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reprodqn.core.atomic import atomic_open

NAME = "requirements.lock"
EXTRAS = frozenset({"study"})  # reprodqn's extras a replication runs: dvc repro, the report
# torch's own distributions: installed with torch's build, never pinned apart from it (NVIDIA's
# management library is reprodqn's own dependency, not torch's)
TORCH_OWN = ("torch", "triton")
TORCH_OWN_PREFIXES = ("cuda-", "nvidia-")
KEPT = ("nvidia-ml-py",)
DEFAULT_INDEX = "https://pypi.org/simple"
TORCH_INDEX = "https://download.pytorch.org/whl"  # a local label's index: TORCH_INDEX/cpu
TIMEOUT_S = 15
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
ANCHOR = re.compile(r'href="([^"#]+)#sha256=([0-9a-fA-F]{64})"')
SDIST = (".tar.gz", ".zip", ".tar.bz2", ".tgz")

Hashes = Callable[[str, str], list[str]]  # (name, version) -> the release's files' SHA-256s


class Unreachable(OSError):
    """The package index did not answer (offline, or refused)."""


def canonical(name: str) -> str:
    """A distribution's name as the index spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_own(name: str) -> bool:
    """Whether a distribution comes with torch's build (torch, triton, CUDA's libraries)."""
    return name in TORCH_OWN or (name.startswith(TORCH_OWN_PREFIXES) and name not in KEPT)


def runtime_lock(hashes: Hashes | None = None) -> str:
    """requirements.lock for a workspace's bundle: the runtime closure's pins, each with its
    hashes (`hashes`: the index's, by default), or none where one pin has none."""
    pins = runtime_closure()
    found, missing = _all_hashes(pins, hashes or index_hashes)
    lines = _header(missing)
    for name, version in pins.items():
        if missing:
            lines.append(f"{name}=={version}")
        else:
            lines.append(f"{name}=={version} \\")
            lines += [f"    --hash=sha256:{h} \\" for h in found[name]]
            lines[-1] = lines[-1].removesuffix(" \\")
    return "\n".join(lines) + "\n"


def shipped_hashed(root: Path, contents: dict[str, bytes | None]) -> bool:
    """Whether the lock a bundle ships carries hashes (REPLICATE.md then installs it with
    --require-hashes): the one in `contents` (a workspace's, made for the bundle), else
    the one on disk under `root` (None in `contents`, or absent from it)."""
    data = contents.get(NAME)
    if data is None:
        data = (root / NAME).read_bytes() if (root / NAME).is_file() else b""
    return b"--hash=" in data


def runtime_closure() -> dict[str, str]:
    """Every distribution reprodqn[study] needs, found through the installed ones' own
    requirements (markers evaluated here), by name with its installed public version;
    reprodqn itself and torch's own left out."""
    from packaging.markers import default_environment  # the study extra's: read as pip does
    from packaging.requirements import Requirement

    installed: dict[str, importlib.metadata.Distribution] = {}
    for distribution in importlib.metadata.distributions():  # sys.path's order: the first wins
        installed.setdefault(canonical(distribution.metadata["Name"] or ""), distribution)
    environment = {key: str(value) for key, value in default_environment().items()}
    extras_seen: dict[str, set[str]] = {}
    todo = [("reprodqn", EXTRAS)]
    while todo:
        name, extras = todo.pop()
        new = {"", *extras} - extras_seen.get(name, set())
        if name not in installed or not new:
            continue
        extras_seen.setdefault(name, set()).update(new)
        for line in installed[name].requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({**environment, "extra": e}) for e in new):
                todo.append((canonical(requirement.name), frozenset(requirement.extras)))
    return {
        name: installed[name].version.split("+")[0]  # a local label is no index's
        for name in sorted(extras_seen)
        if name != "reprodqn" and not torch_own(name)
    }


def torch_build() -> tuple[str, str] | None:
    """The installed torch's version (its build's local label included) and the index
    that serves that build; None without torch."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    label = version.partition("+")[2]
    return version, (f"{TORCH_INDEX}/{label}" if label else DEFAULT_INDEX)


def _header(missing: str) -> list[str]:
    python = f"Python {platform.python_version()}, {sys.platform} {platform.machine()}"
    lines = [
        "# What the study needs to run and replicate: reprodqn[study]'s dependencies as",
        f"# installed where it was bundled ({python}); no test or lint tools.",
    ]
    if missing:
        lines += [
            f"# No hashes: {missing} (pip's hash mode is all or nothing);",
            "# install with `pip install -r requirements.lock` (by version).",
        ]
    else:
        lines += [
            f"# Hashes: every file of each release on {_index()},",
            "# for `pip install --require-hashes -r requirements.lock`.",
        ]
    build = torch_build()
    if build is not None:
        version, index = build
        lines += [
            f"# torch=={version}: the build the study ran, installed first from its own index:",
            f"#   pip install torch=={version} --index-url {index}",
        ]
    return lines


def _all_hashes(pins: dict[str, str], hashes: Hashes) -> tuple[dict[str, list[str]], str]:
    """Each pin's hashes, and why some pin has none ('' if every pin has some). One pin is
    asked first: if the index cannot be reached, no other is (each would wait its timeout)."""
    names = list(pins)
    try:
        found = {name: hashes(name, pins[name]) for name in names[:1]}
        with ThreadPoolExecutor(8) as pool:
            rest = pool.map(lambda name: hashes(name, pins[name]), names[1:])
            found.update(zip(names[1:], rest, strict=True))
    except Unreachable as error:
        return {}, f"the package index could not be reached ({error})"
    missing = [f"{n}=={pins[n]}" for n in names if not found[n]]
    if not missing:
        return found, ""
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return found, f"the package index has no file of {', '.join(missing[:3])}{more}"


def index_hashes(name: str, version: str) -> list[str]:
    """The SHA-256 of every file of `name`'s release `version` on the index (pip's
    PIP_INDEX_URL, else PyPI), from the cache where asked before (a release's files never
    change); [] if it has none. Unreachable if it does not answer."""
    cached = _cache_dir() / f"{name}=={version}.json"
    try:
        return json.loads(cached.read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        files = _project_files(f"{_index().rstrip('/')}/{name}/")
    except urllib.error.HTTPError as error:
        if error.code == 404:  # no such project there
            return []
        raise Unreachable(f"{_index()}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise Unreachable(f"{_index()}: {getattr(error, 'reason', error)}") from None
    except (ValueError, KeyError):  # a page not understood
        return []
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(version)
    except InvalidVersion:  # no index file can be named by it
        return []
    found = sorted({digest for filename, digest in files if _release(filename) == release})
    if found:
        try:
            with atomic_open(cached) as handle:
                json.dump({"sha256": found}, handle)
        except OSError:
            pass  # a cache that cannot be written is only slower
    return found


def _project_files(url: str) -> list[tuple[str, str]]:
    """(file name, SHA-256) of each file the index's project page lists (PEP 691's JSON,
    else PEP 503's HTML anchors)."""
    request = urllib.request.Request(url, headers={"Accept": f"{SIMPLE_JSON}, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        kind, body = response.headers.get("Content-Type", ""), response.read()
    if kind.startswith(SIMPLE_JSON):
        return [
            (entry["filename"], entry["hashes"]["sha256"].lower())
            for entry in json.loads(body)["files"]
            if "sha256" in entry.get("hashes", {})
        ]
    page = body.decode("utf-8", "replace")
    return [(href.rsplit("/", 1)[-1], digest.lower()) for href, digest in ANCHOR.findall(page)]


def _release(filename: str) -> object | None:
    """The version a wheel's or an sdist's file name gives (a packaging Version)."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith(SDIST):
            return parse_sdist_filename(_as_tar_gz(filename))[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def _as_tar_gz(filename: str) -> str:
    """packaging reads only .tar.gz and .zip sdists: other archives named as one."""
    for suffix in (".tar.bz2", ".tgz"):
        if filename.endswith(suffix):
            return filename.removesuffix(suffix) + ".tar.gz"
    return filename


def _index() -> str:
    return os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


def _cache_dir() -> Path:
    """The cache of one index's answers (another index may serve other files)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    index = hashlib.sha256(_index().encode()).hexdigest()[:12]
    return Path(root) / "reprodqn" / "index-hashes" / index
