"""What a script spends before its first step: `exact.setup()` + `exact.start_run()` in a
fresh run folder, beyond torch's own import, each in a fresh process as a script runs.

The first process starts with an empty SBOM cache, so it makes the environment's SBOM
(cyclonedx: 2-3 s); every later one links the kept file. Prints each process's seconds
(torch's import, setup(), start_run(), the two together) and the first's total over the
second's. `--keep-cache` uses the user's cache instead (then the first links too).

    .venv/bin/python bench/startup.py [--processes 3] [--keep-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_START = """
import json, sys, time
from pathlib import Path
from reprodqn import exact
exact.cpu_floor("portable")
began = time.perf_counter()
import torch
imported = time.perf_counter()
process = exact.setup()
set_up = time.perf_counter()
exact.start_run(Path(sys.argv[1]), {"lr": 0.1}, process)
started = time.perf_counter()
print(json.dumps({"torch": imported - began, "setup": set_up - imported,
                  "start_run": started - set_up}))
"""


def one_start(run: Path, environment: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ONE_START, str(run)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--keep-cache", action="store_true", help="the user's SBOM cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        environment = dict(os.environ)
        if not args.keep_cache:
            environment["XDG_CACHE_HOME"] = str(Path(scratch) / "cache")
        totals = []
        for index in range(args.processes):
            seconds = one_start(Path(scratch) / f"run-{index}", environment)
            totals.append(seconds["setup"] + seconds["start_run"])
            print(
                f"process {index + 1}: import torch {seconds['torch']:.2f} s, "
                f"setup() {seconds['setup']:.3f} s, start_run() {seconds['start_run']:.3f} s, "
                f"beyond torch {totals[-1]:.3f} s"
            )
    if len(totals) > 1:
        print(f"first / second: {totals[0] / totals[1]:.1f}x")


if __name__ == "__main__":
    main()
