"""Progress for long work: periodic one-line reports with rate and ETA.

Lines rather than a redrawn bar, because training and evaluation mostly run under DVC,
worker pools and Slurm, whose logs keep every carriage return.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    def __init__(self, label: str, total: int, unit: str = "steps", start: int = 0,
                 interval: float = 15.0, stream: TextIO | None = None):
        self.label, self.total, self.unit = label, total, unit
        self.interval = interval
        self.stream = stream or sys.stderr
        self._start_done = start
        self._start_time = self._last_time = time.monotonic()

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_time < self.interval and done < self.total:
            return
        self._last_time = now
        elapsed = now - self._start_time
        rate = (done - self._start_done) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        percent = 100.0 * done / self.total if self.total else 100.0
        eta_text = format_duration(eta) if eta == eta else "?"
        line = (f"{self.label}: {done}/{self.total} {self.unit} ({percent:.1f}%), "
                f"{rate:.1f} {self.unit}/s, ETA {eta_text}")
        print(line + (f", {extra}" if extra else ""), file=self.stream, flush=True)
