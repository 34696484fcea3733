"""The integer INTER_LINEAR on this CPU against x86-64's OpenCV: reads an .npz of grayscale
frames and the bytes x86-64's cv2.resize made of them (tests/test_emulated.py writes it),
prints the tables' SHA-256, whether reprodqn's resize gives those bytes here, and how many
frames this machine's own cv2.resize (if any) makes otherwise.

    tools/emulated/run.sh aarch64 ROOT -- python tools/emulated/resize_check.py FRAMES.npz
"""

from __future__ import annotations

import hashlib
import platform
import sys

import numpy as np

from reprodqn.training import linear_resize

SIZES = ((160, 84), (210, 84), (250, 84))


def tables_digest() -> str:
    tables = [linear_resize.columns(*s) for s in SIZES] + [linear_resize.rows(*s) for s in SIZES]
    return hashlib.sha256(b"".join(a.tobytes() for t in tables for a in t)).hexdigest()


def main(path: str) -> None:
    data = np.load(path)
    grays, expected = data["grays"], data["x86"]
    ours = np.stack([linear_resize.resize(g, expected.shape[1]) for g in grays])
    print("machine", platform.machine())
    print("tables", tables_digest())
    print("ours_equal", int(np.array_equal(ours, expected)), len(grays))
    try:
        import cv2
    except ImportError:
        print("opencv_differing none")
        return
    theirs = np.stack([cv2.resize(g, expected.shape[1:][::-1], interpolation=cv2.INTER_LINEAR)
                       for g in grays])  # fmt: skip
    print("opencv_differing", int((theirs != expected).any(axis=(1, 2)).sum()))


if __name__ == "__main__":
    main(sys.argv[1])
