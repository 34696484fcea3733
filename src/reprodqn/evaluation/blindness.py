"""The blind-network alarm: is a run's Q-network looking at the screen? Probed at every
evaluated checkpoint into probe.csv (`probe`), logged to MLflow, a panel of the report.

A network whose Q-values do not depend on its input gives every state the same values and
the same greedy action; its score is then the score of one fixed action, and a study of
such runs measures nothing the paper is about. At every evaluated checkpoint the evaluate
stage probes the network on the end states of the start sequences (for every group, the
sticky-action one included: this probes the network, it plays no episode), in the
evaluation's fixed chunks, and records in probe.csv:

- q_spread: how much Q varies across those states (the standard deviation over states,
  averaged over actions): 0 for a network blind to the screen;
- greedy_actions: how many distinct greedy actions it picks across them;
- max_q: the mean of max_a Q (the Nature paper's "average action value").

The alarm: a run whose spread at its third checkpoint after step 0 is still within 2x of
its step-0 value. With the authors' optimizer (torch's RMSprop, eps 0.01 after the square
root, on a mean loss) this is expected for the first few hundred thousand steps: per-weight
gradients of 1e-5..1e-4 make each update plain SGD with step 0.025 g, and the torso barely
moves (docs/dqn-family.md, "Does it learn?").
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import write_text

PROBE_FIELDS = ("step", "q_spread", "greedy_actions", "max_q")
ALARM_FACTOR = 2.0  # spread within this factor of step 0's ...
ALARM_CHECKPOINT = 3  # ... at this checkpoint after step 0


def write_probe(out_dir: Path, records: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, PROBE_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in records
    )
    write_text(out_dir / workspace.PROBE_CSV, buffer.getvalue())


def read_probe(out_dir: Path) -> list[dict]:
    """probe.csv's records, [] where a run has none (evaluated before the probe existed)."""
    path = out_dir / workspace.PROBE_CSV
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return [
            {
                "step": int(r["step"]),
                "q_spread": float(r["q_spread"]),
                "greedy_actions": int(r["greedy_actions"]),
                "max_q": float(r["max_q"]),
            }
            for r in csv.DictReader(handle)
        ]


def alarm(records: list[dict]) -> dict | None:
    """The alarm for one run's probe records: {step0, step, spread, ratio} when its spread at
    the third checkpoint after step 0 is still within ALARM_FACTOR of step 0's; None when it
    grew past that, or the run has no step 0 or not that many checkpoints yet."""
    by_step = sorted(records, key=lambda r: r["step"])
    if len(by_step) <= ALARM_CHECKPOINT or by_step[0]["step"] != 0:
        return None
    start, then = by_step[0], by_step[ALARM_CHECKPOINT]
    if start["q_spread"] > 0:
        ratio = then["q_spread"] / start["q_spread"]
    else:
        ratio = float("inf") if then["q_spread"] > 0 else 0.0
    if ratio >= ALARM_FACTOR:
        return None
    return {
        "step0": start["q_spread"],
        "step": then["step"],
        "spread": then["q_spread"],
        "ratio": ratio,
        "greedy_actions": then["greedy_actions"],
    }


def alarm_line(found: dict) -> str:
    return (
        f"blind-network alarm: Q's spread across the start states at step "
        f"{found['step']:,} is {found['spread']:.3g}, {found['ratio']:.2f}x its step-0 "
        f"value (under {ALARM_FACTOR:g}x); {found['greedy_actions']} distinct greedy "
        "action(s). The network is not yet looking at the screen."
    )


def report_lines(study, optimizer: str) -> list[str]:
    """The report's panel: the probe figure and, plainly, every run whose alarm is raised."""
    lines = [
        "## Is the network looking at the screen?",
        "",
        "At every checkpoint each run's network is probed on the end states of the start "
        "sequences: Q's spread across them (0 for a network blind to the screen) and "
        "the number of distinct greedy actions (`probe.csv` beside each `eval.csv`).",
        "",
        "![Blind-network probe](figure_probe.png)",
        "",
    ]
    probed = [r for runs in study.values() for r in runs if r.probe]
    if not probed:
        return [*lines, "No run has probe records (evaluated before the probe existed).", ""]
    raised = [(r, found) for r in probed if (found := alarm(r.probe))]
    undecided = [r for r in probed if len(r.probe) <= ALARM_CHECKPOINT]
    if raised:
        lines.append(
            f"**Blind-network alarm in {len(raised)} of {len(probed)} runs**: at "
            f"their {ALARM_CHECKPOINT}rd checkpoint after step 0, Q's spread is "
            f"still within {ALARM_FACTOR:g}x of its step-0 value, so their scores are "
            "those of networks that do not yet look at the screen."
        )
        lines += [
            "",
            "| run | step | spread | x step 0 | greedy actions |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.group}/{r.run} | {f['step']:,} | {f['spread']:.3g} | "
            f"{f['ratio']:.2f} | {f['greedy_actions']} |"
            for r, f in raised
        ]
        if optimizer == "rmsprop":
            lines += [
                "",
                "Expected early with the authors' optimizer: torch's RMSprop adds "
                "eps = 0.01 after the square root, and with a mean loss the per-weight "
                "gradients (1e-5 to 1e-4) leave every update plain SGD with step "
                "0.025 g, 3.2x smaller than DeepMind's centred RMSProp; the torso "
                "barely moves for the first few hundred thousand steps (docs/"
                'dqn-family.md, "Does it learn?").',
            ]
    else:
        lines.append(
            f"No alarm: every run with {ALARM_CHECKPOINT} checkpoints after step 0 "
            f"has Q's spread at least {ALARM_FACTOR:g}x its step-0 value."
        )
    if undecided:
        lines += [
            "",
            f"{len(undecided)} run(s) have fewer than {ALARM_CHECKPOINT} checkpoints "
            "after step 0: not judged yet.",
        ]
    return [*lines, ""]
