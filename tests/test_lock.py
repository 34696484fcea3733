"""requirements.lock installs on every image base's own Python (tools.lock_wheels): each
locked package has a wheel with a locked hash for CPython 3.11 (Debian bookworm, CI's base)
and 3.12 (the CUDA base, Ubuntu 24.04), or a locked source archive."""

from __future__ import annotations

import hashlib

from tools import lock_wheels
from tools.lock_wheels import TARGETS, Locked, missing, read_lock


def test_every_locked_package_installs_on_every_supported_base():
    entries = read_lock(lock_wheels.LOCK.read_text())
    assert len(entries) > 100 and any(e.name == "torch" for e in entries)
    assert missing(entries, TARGETS) == []  # asks the registry (PyPI's JSON simple index)


def fake_index(name: str) -> list[dict]:
    files = {
        "numpy": [
            "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",
            "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl",
            "numpy-2.4.6.tar.gz",
        ],
        "six": ["six-1.17.0-py2.py3-none-any.whl"],
        "antlr4-python3-runtime": ["antlr4-python3-runtime-4.9.3.tar.gz"],
    }[name]
    return [
        {"filename": f, "hashes": {"sha256": hashlib.sha256(f.encode()).hexdigest()}} for f in files
    ]


def locked(name: str, version: str, *filenames: str) -> Locked:
    return Locked(
        name,
        version,
        frozenset(
            next(f["hashes"]["sha256"] for f in fake_index(name) if f["filename"] == n)
            for n in filenames
        ),
    )


def test_a_planted_missing_wheel_is_named_with_its_base():
    # the lock lists the 3.11 wheel's hash (and the source's) only: the 3.12 base would
    # compile numpy, so it cannot install it as locked
    entries = [
        locked(
            "numpy",
            "2.4.6",
            "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",
            "numpy-2.4.6.tar.gz",
        ),
        locked("six", "1.17.0", "six-1.17.0-py2.py3-none-any.whl"),
        locked("antlr4-python3-runtime", "4.9.3", "antlr4-python3-runtime-4.9.3.tar.gz"),
    ]
    problems = missing(entries, TARGETS, fake_index)
    assert problems == ["numpy==2.4.6: no wheel with a locked hash for " + TARGETS[1].name]
    # with both wheels' hashes locked, nothing is missing
    entries[0] = locked(
        "numpy",
        "2.4.6",
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",
        "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl",
    )
    assert missing(entries, TARGETS, fake_index) == []


def test_a_wheel_for_a_newer_glibc_than_the_base_does_not_count():
    files = [
        {
            "filename": "numpy-2.4.6-cp312-cp312-manylinux_2_40_x86_64.whl",
            "hashes": {"sha256": "ab" * 32},
        }
    ]
    entry = Locked("numpy", "2.4.6", frozenset({"ab" * 32}))
    assert len(missing([entry], TARGETS[1:], lambda name: files)) == 1


def test_the_lock_reader_takes_names_versions_and_hashes():
    text = (
        "aiohttp==3.14.5 \\\n    --hash=sha256:"
        + "a" * 64
        + " \\\n    --hash=sha256:"
        + "b" * 64
        + "\n    # via mlflow\nPyYAML==6.0.3 ; python_version >= '3.11' \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n"
    )
    assert read_lock(text) == [
        Locked("aiohttp", "3.14.5", frozenset({"a" * 64, "b" * 64})),
        Locked("pyyaml", "6.0.3", frozenset({"c" * 64})),
    ]
