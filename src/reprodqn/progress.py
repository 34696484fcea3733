"""Progress for long work: periodic one-line reports with rate and ETA.

Lines rather than a redrawn bar, because training and evaluation mostly run under DVC,
worker pools and Slurm, whose logs keep every carriage return.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from reprodqn.events import Finished, ProcessRecord, Started


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


def report_training(events, label: str) -> None:
    """Print a run's progress from its events."""
    progress = None
    for event in events:
        if isinstance(event, Started):
            how = f"resumed at step {event.step}" if event.resumed else "started"
            print(f"{label}: {how}", file=sys.stderr, flush=True)
            progress = Progress(label, event.total, start=event.step)
        elif isinstance(event, ProcessRecord) and progress is not None:
            record = event.record
            loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
            progress.update(event.step, extra=f"loss {loss}, epsilon {record['epsilon']:.3f}")
        elif isinstance(event, Finished):
            state = "already complete" if event.already else "complete"
            print(f"{label}: {state} ({event.step} steps)", file=sys.stderr, flush=True)
