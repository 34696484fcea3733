"""Progress for long work: one-line reports with rate and ETA, printed by time.

Lines rather than a redrawn bar, because training and evaluation mostly run under DVC,
worker pools and Slurm, whose logs keep every carriage return. A training run reports at
once when it starts, then at growing intervals (10 s, 20 s, ... up to 5 min), and its rate
and ETA come from the current phase only: before learning starts an agent step costs about
a twentieth of one after, so a rate measured across both would promise far too early an
end. Each line is also written to the run's `progress.json`, where the study reads it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from reprodqn.core.atomic import write_json
from reprodqn.core.events import Finished, ProcessRecord, Started, Stepped

FIRST_INTERVAL = 10.0  # seconds to the first line with a rate
MAX_INTERVAL = 300.0  # the interval doubles after each line, up to this


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Done out of total, with the rate and ETA since `start`, at most every `interval`."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str = "steps",
        start: int = 0,
        interval: float = 15.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.unit = label, total, unit
        self.interval = interval
        self.stream = stream or sys.stderr
        self.clock = clock
        self._start_done = start
        self._start_time = self._last_time = clock()

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_time < self.interval and done < self.total:
            return
        self._last_time = now
        elapsed = now - self._start_time
        rate = (done - self._start_done) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        percent = 100.0 * done / self.total if self.total else 100.0
        eta_text = format_duration(eta) if eta == eta else "?"
        line = (
            f"{self.label}: {done}/{self.total} {self.unit} ({percent:.1f}%), "
            f"{rate:.1f} {self.unit}/s, ETA {eta_text}"
        )
        print(line + (f", {extra}" if extra else ""), file=self.stream, flush=True)


class RunProgress:
    """A training run in two phases: filling the replay memory (no updates) and learning.
    Rate and ETA are measured within the current phase; while filling, the run's ETA is
    unknown (learning's rate is not yet seen), and the line says when learning starts."""

    def __init__(
        self,
        label: str,
        total: int,
        start: int,
        learning_starts: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        record: Path | None = None,
    ):
        self.label, self.total, self.learning_starts = label, total, learning_starts
        self.stream = stream or sys.stderr
        self.clock, self.record = clock, record
        self.interval = FIRST_INTERVAL
        self.phase = self._phase(start)
        self._phase_step, self._phase_time = start, clock()
        self._last_time = self._phase_time
        self.extra = ""
        self._ended = False
        self._emit(
            start,
            f"{self.phase} from step {start}"
            + (
                f", learning starts at step {learning_starts}"
                if self.phase == "filling replay"
                else ""
            ),
            None,
            None,
        )

    def _phase(self, step: int) -> str:
        return "filling replay" if step <= self.learning_starts else "learning"

    def update(self, step: int) -> None:
        now = self.clock()
        phase = self._phase(step)
        if phase != self.phase:  # a new phase: its own rate from here, and say so now
            self.phase, self._phase_step, self._phase_time = phase, step, now
            self.interval = FIRST_INTERVAL
            # events come every log_every steps, so the boundary itself is learning_starts
            self._emit(step, f"learning started at step {self.learning_starts}", None, None)
            return
        if now - self._last_time < self.interval and step < self.total:
            return
        if step >= self.total:  # the last step's record and its step event: one line
            if self._ended:
                return
            self._ended = True
        elapsed = now - self._phase_time
        rate = (step - self._phase_step) / elapsed if elapsed > 0 else 0.0
        if self.phase == "filling replay":
            to_learning = (self.learning_starts - step) / rate if rate > 0 else None
            note = (
                "filling replay, learning starts in "
                f"{format_duration(to_learning) if to_learning is not None else '?'}; "
                "run ETA once learning runs"
            )
            eta = None
        else:
            eta = (self.total - step) / rate if rate > 0 else None
            note = "learning"
        self._emit(step, note, rate, eta)
        self.interval = min(self.interval * 2, MAX_INTERVAL)

    def _emit(self, step: int, note: str, rate: float | None, eta: float | None) -> None:
        self._last_time = self.clock()
        percent = 100.0 * step / self.total if self.total else 100.0
        parts = [f"{step}/{self.total} steps ({percent:.1f}%)", note]
        if rate is not None:
            parts.append(f"{rate:.1f} steps/s")
        if self.phase == "learning" and rate is not None:
            parts.append(f"ETA {format_duration(eta) if eta is not None else '?'}")
        if self.extra:
            parts.append(self.extra)
        print(f"{self.label}: " + ", ".join(parts), file=self.stream, flush=True)
        if self.record is not None:
            write_json(
                self.record,
                {
                    "step": step,
                    "total": self.total,
                    "phase": self.phase,
                    "steps_per_second": rate,
                    "eta_seconds": eta,
                },
            )


def passing_progress(
    events: Iterable,
    label: str,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = None,
) -> Iterator:
    """A run's events passed on unchanged while its progress is printed as `train` prints
    it (a line at once, then by time, rate and ETA within the current phase): for a loop
    that consumes the events itself, as experiments/learning_check.py does."""
    progress = None
    for event in events:
        if isinstance(event, Started):
            progress = RunProgress(
                label, event.total, event.step, event.learning_starts, stream, clock
            )
        elif isinstance(event, ProcessRecord | Stepped) and progress is not None:
            progress.update(event.step)
        yield event


def report_training(
    events,
    label: str,
    record: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = None,
) -> None:
    """Print a run's progress from its events (and keep its latest line in `record`)."""
    stream = stream or sys.stderr
    print(f"{label}: starting (conditions, run directory, resume point)", file=stream, flush=True)
    progress = None
    for event in events:
        if isinstance(event, Started):
            how = f"resumed at step {event.step}" if event.resumed else "started"
            print(f"{label}: {how}", file=stream, flush=True)
            progress = RunProgress(
                label, event.total, event.step, event.learning_starts, stream, clock, record
            )
        elif isinstance(event, ProcessRecord) and progress is not None:
            record_ = event.record
            loss = "-" if record_["loss"] is None else f"{record_['loss']:.4f}"
            progress.extra = f"loss {loss}, epsilon {record_['epsilon']:.3f}"
            progress.update(event.step)
        elif isinstance(event, Stepped) and progress is not None:
            progress.update(event.step)
        elif isinstance(event, Finished):
            state = "already complete" if event.already else "complete"
            print(f"{label}: {state} ({event.step} steps)", file=stream, flush=True)
            if record is not None:
                write_json(
                    record,
                    {
                        "step": event.step,
                        "total": event.step,
                        "phase": "complete",
                        "steps_per_second": None,
                        "eta_seconds": 0.0,
                    },
                )


class StudyProgress:
    """A study's train stage by time: each running run's latest line (its progress.json)
    and the stage's ETA: the runs still to go, at the speed of runs already learning,
    shared among the workers."""

    def __init__(
        self,
        label: str,
        records: dict[str, Path],
        workers: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.records, self.workers = label, records, max(workers, 1)
        self.stream = stream or sys.stderr
        self.clock = clock
        self.interval = FIRST_INTERVAL
        self._last_time = clock()

    def poll(self) -> None:
        if self.clock() - self._last_time < self.interval:
            return
        self._last_time = self.clock()
        self.interval = min(self.interval * 2, MAX_INTERVAL)
        print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        states = {name: _read_record(path) for name, path in self.records.items()}
        complete = [n for n, s in states.items() if s and s["phase"] == "complete"]
        running = {n: s for n, s in states.items() if s and s["phase"] != "complete"}
        learning = [
            s for s in running.values() if s["phase"] == "learning" and s.get("steps_per_second")
        ]
        whole_run = (
            sum(s["total"] / s["steps_per_second"] for s in learning) / len(learning)
            if learning
            else None
        )  # a run's length at the learning rate
        remaining = []
        for name in self.records:
            state = states[name]
            if name in complete:
                continue
            if state and state.get("eta_seconds") is not None:
                remaining.append(state["eta_seconds"])
            else:
                remaining.append(whole_run)
        if remaining and None not in remaining:
            eta = format_duration(max(max(remaining), sum(remaining) / self.workers))
        else:
            eta = "? (no run learning yet)" if remaining else "0s"
        runs = "; ".join(
            f"{n} {s['step']}/{s['total']} {s['phase']}"
            + (
                f" ETA {format_duration(s['eta_seconds'])}"
                if s.get("eta_seconds") is not None
                else ""
            )
            for n, s in running.items()
        )
        return (
            f"{self.label}: {len(complete)}/{len(self.records)} runs complete"
            + (f", running: {runs}" if runs else "")
            + f"; stage ETA {eta}"
        )


def _read_record(path: Path) -> dict | None:
    """A run's progress.json, or None while it has none (or mid-replace, never: atomic)."""
    import json

    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


class StagedRecord:
    """Work in stages whose results go into one JSON record as each ends, with its seconds,
    and a line saying so: work cut off by a time limit leaves what it had finished."""

    def __init__(
        self,
        path: Path,
        result: dict,
        label: str,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.path, self.result, self.label, self.clock = path, result, label, clock
        self.since = clock()
        result["seconds"] = {}

    def note(self, **so_far) -> None:
        """A stage's results so far, kept while it goes on."""
        self.result.update(so_far)
        write_json(self.path, self.result)

    def done(self, key: str, value) -> None:
        now = self.clock()
        seconds, self.since = now - self.since, now
        self.result[key] = value
        self.result["seconds"][key] = round(seconds, 1)
        write_json(self.path, self.result)
        print(f"{self.label}: {key} done in {seconds:.0f} s", file=sys.stderr)
