"""Progress lines from training events and a fake clock: a line at once, then by time
(not by process record), rates and ETAs per phase, and the study's per-run and overall
ETA from the runs' progress.json. No sleeps: the clock is a variable."""

from __future__ import annotations

import io
import json

from reprodqn.core.events import Finished, ProcessRecord, Started, Stepped
from reprodqn.core.progress import StagedRecord, StudyProgress, report_training


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(step: int) -> ProcessRecord:
    return ProcessRecord(step, {"loss": None, "epsilon": 1.0})


def simulate(clock: Clock, steps_and_seconds: list[tuple[int, float]]):
    """Events of a run: Started, then a Stepped event every 100 steps, the clock advancing
    at the given seconds per step; one process record only at the very end."""
    yield Started(step=0, total=3000, resumed=False, learning_starts=1000)
    step = 0
    for until, seconds_per_step in steps_and_seconds:
        while step < until:
            step += 100
            clock.now += 100 * seconds_per_step
            yield Stepped(step)
    yield record(step)
    yield Finished(step)


def test_a_line_at_start_then_by_time_with_the_current_phase_rate(tmp_path):
    clock, out = Clock(), io.StringIO()
    path = tmp_path / "progress.json"
    # filling replay at 100 steps/s (10 s), then learning at 5 steps/s: twenty times slower
    events = simulate(clock, [(1000, 0.01), (3000, 0.2)])
    lines = []

    def spy(events):
        for event in events:
            before = out.getvalue().count("\n")
            yield event
            if out.getvalue().count("\n") > before:
                lines.append((clock.now - 1000.0, out.getvalue().splitlines()[-1]))

    report_training(spy(events), "train g/0", record=path, clock=clock, stream=out)
    text = out.getvalue().splitlines()
    assert text[0] == "train g/0: starting (conditions, run directory, resume point)"
    assert text[2] == (
        "train g/0: 0/3000 steps (0.0%), filling replay from step 0, learning starts at step 1000"
    )  # printed at start, before any rate
    first_rate = next(line for t, line in lines if "steps/s" in line)
    assert "filling replay, learning starts in" in first_rate and "100.0 steps/s" in first_rate
    assert "ETA" not in first_rate.replace("run ETA once learning runs", "")
    started = next(t for t, line in lines if "learning started at step 1000" in line)
    assert "1100/3000 steps" in dict(lines)[started]  # the first event past the boundary
    assert started == 30.0  # at once, at the first event past learning_starts (10 s + 20 s)
    learning = [line for t, line in lines if ", learning, " in line]
    # 5 steps/s from the phase start, never the 100 steps/s of filling, nor a blend
    assert learning and all("5.0 steps/s" in line for line in learning)
    first = learning[0]
    step = int(first.split(": ")[1].split("/")[0])
    assert f"ETA {(3000 - step) // 5 // 60}m" in first
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:], strict=False)]
    assert max(gaps) <= 300 + 20  # lines keep coming by time, at most 5 min apart
    assert json.loads(path.read_text())["phase"] == "complete"


def test_no_record_needed_for_a_line_within_15_seconds():
    """A run resumed while learning (7 steps/s; a process record every few thousand steps)
    prints a rate line by time alone, within 15 s."""
    clock, out = Clock(), io.StringIO()
    printed_at = []

    def events():
        yield Started(step=2000, total=10_000, resumed=True, learning_starts=1000)
        for step in range(2100, 4000, 100):
            clock.now += 100 / 7.0  # 7 steps/s: 14 s per Stepped event
            yield Stepped(step)
            printed_at.append((clock.now - 1000.0, out.getvalue().count("steps/s")))

    report_training(events(), "train g/0", clock=clock, stream=out)
    first = next(t for t, count in printed_at if count)
    assert first <= 15.0 and "7.0 steps/s" in out.getvalue()


def test_the_last_step_is_one_line_though_two_events_reach_it():
    """The loop's last step yields its process record, then its step event: one line, with
    the record's loss and epsilon."""
    clock, out = Clock(), io.StringIO()

    def events():
        yield Started(step=0, total=200, resumed=False, learning_starts=0)
        for step in (100, 200):
            clock.now += 10
            yield ProcessRecord(step, {"loss": 0.5, "epsilon": 0.1})
            yield Stepped(step)
        yield Finished(200)

    report_training(events(), "train g/0", clock=clock, stream=out)
    last = [line for line in out.getvalue().splitlines() if line.startswith("train g/0: 200/200")]
    assert len(last) == 1 and "loss 0.5000, epsilon 0.100" in last[0]


def test_study_line_per_run_and_overall(tmp_path):
    clock, out = Clock(), io.StringIO()
    records = {
        name: tmp_path / f"{name.replace('/', '-')}.json" for name in ("d/0", "d/1", "e/0", "e/1")
    }
    progress = StudyProgress("study train", records, workers=2, stream=out, clock=clock)
    progress.poll()
    assert out.getvalue() == ""  # nothing before the first interval
    records["d/0"].write_text(
        json.dumps(
            {
                "step": 3000,
                "total": 3000,
                "phase": "complete",
                "steps_per_second": None,
                "eta_seconds": 0,
            }
        )
    )
    records["d/1"].write_text(
        json.dumps(
            {
                "step": 500,
                "total": 3000,
                "phase": "filling replay",
                "steps_per_second": 100.0,
                "eta_seconds": None,
            }
        )
    )
    clock.now += 10
    progress.poll()
    assert out.getvalue().strip() == (
        "study train: 1/4 runs complete, running: d/1 500/3000 "
        "filling replay; stage ETA ? (no run learning yet)"
    )
    records["e/0"].write_text(
        json.dumps(
            {
                "step": 2000,
                "total": 3000,
                "phase": "learning",
                "steps_per_second": 10.0,
                "eta_seconds": 100.0,
            }
        )
    )
    clock.now += 5
    progress.poll()
    assert out.getvalue().count("\n") == 1  # the interval has doubled to 20 s
    clock.now += 15
    progress.poll()
    last = out.getvalue().splitlines()[-1]
    assert "e/0 2000/3000 learning ETA 1m40s" in last
    # d/1 and e/1 still need a whole run at the learning rate (300 s), e/0 100 s: 700 s of
    # work on 2 workers
    assert last.endswith("stage ETA 5m50s")


def test_each_stage_is_kept_as_it_ends_with_its_seconds(tmp_path, capsys):
    """What a time limit cannot take back: a stage's result and seconds once it is done,
    and results so far while one goes on."""
    clock, path = Clock(), tmp_path / "partial.json"
    stages = StagedRecord(path, {"device": "cuda"}, "gpu-check", clock=clock)
    clock.now += 42.0
    stages.done("deterministic", {"weights": None})
    kept = json.loads(path.read_text())
    assert kept["deterministic"] == {"weights": None} and kept["seconds"] == {"deterministic": 42}
    assert "gpu-check: deterministic done in 42 s" in capsys.readouterr().err
    clock.now += 5.0
    stages.note(sharing={"standard": {"1": {}}})
    kept = json.loads(path.read_text())
    assert kept["sharing"] == {"standard": {"1": {}}} and set(kept["seconds"]) == {"deterministic"}
    clock.now += 3.0
    stages.done("sharing", {"standard": {"1": {}, "4": {}}})
    assert json.loads(path.read_text())["seconds"]["sharing"] == 8.0  # since the last one ended


def test_a_loop_that_consumes_the_events_itself_prints_progress_too():
    """experiments/learning_check.py printed nothing for 17 minutes before its first line:
    it read the events for its checkpoints and printed only at each."""
    from reprodqn.core.progress import passing_progress

    clock, out = Clock(), io.StringIO()
    events = list(simulate(Clock(), [(1000, 0.01), (3000, 0.2)]))
    replayed = []
    for event in passing_progress(iter(events), "learning check", clock=clock, stream=out):
        replayed.append(event)
        clock.now += 10.0 if isinstance(event, Stepped) else 0.0
    assert replayed == events  # passed on unchanged
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("learning check: 0/3000 steps (0.0%), filling replay from step 0")
    assert any(", learning, " in line and "ETA" in line for line in lines)
