"""A second process loads every universal kernel from numba's disk cache and compiles none:
a kernel closing over a numba object named anew in each process (a dispatcher, an
intrinsic, a tile called by its address) was compiled again by every process, some 15 s of
CPU each, and its cache grew by an entry each time."""

from __future__ import annotations

import os
import subprocess
import sys

# a universal update of a small network with every layer kind, and a forward with no
# gradient (acting), at the given thread count: every kernel the DQN uses
SCRIPT = """
import sys
import torch
from reprodqn.exact import universal

threads = int(sys.argv[1])
torch.set_num_threads(threads)
universal.configure(threads)
net = torch.nn.Sequential(
    universal.Conv2d(2, 4, 3, stride=2), universal.ReLU(), torch.nn.Flatten(),
    universal.Linear(4 * 3 * 3, 3),
)
universal.init_(net, torch.Generator().manual_seed(0))
frames = torch.randint(0, 256, (5, 2, 7, 7), generator=torch.Generator().manual_seed(1),
                       dtype=torch.uint8)
optimizer = universal.RMSprop(net.parameters(), lr=1e-3, alpha=0.95, eps=0.01)
with universal.strict():
    q = net(universal.scale_frames(frames))
    loss = universal.q_loss(q, torch.tensor([0, 1, 2, 0, 1]), torch.zeros(5), "huber", "mean")
    loss.backward()
    optimizer.step()
"""


def compiled(cache_dir, threads: int) -> list[str]:
    """The cache files numba saved (compiled) in one process."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "NUMBA_DEBUG_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(threads)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "data saved" in line]


def test_a_second_process_compiles_no_universal_kernel(tmp_path):
    first = compiled(tmp_path, threads=1)
    assert any("tiled" in line for line in first)  # the product compiled and cached
    assert compiled(tmp_path, threads=1) == []


def test_serial_and_parallel_builds_are_cached_apart(tmp_path):
    """numba keys a cached build by source and closure, not by its flags: the two builds of
    one kernel loaded each other's code."""
    serial = compiled(tmp_path, threads=1)
    parallel = compiled(tmp_path, threads=2)
    assert any(".parallel-" in line for line in parallel)
    assert not any(".parallel-" in line for line in serial)
