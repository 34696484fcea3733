"""`make docs-tables`: the README's Table 1 of the laptop study (included in the manual's
laptop page), from the committed reference's own report, so the numbers a reader sees are
the ones `make laptop-reference` committed and `reprodqn verify` checks."""

from __future__ import annotations

import csv
import json
import re

from reprodqn.config.study import GROUP_NAMES
from tools.package_graph import ROOT

README = ROOT / "README.md"
REPORTS = ROOT / "reference" / "laptop" / "reports"
TABLE1 = re.compile(
    r"(<!-- --8<-- \[start:table1\] -->\n)(.*?)(<!-- --8<-- \[end:table1\] -->)", re.S
)
COLUMNS = ("best_mean", "best_std", "final_mean", "final_std")


def _ours(value: float) -> str:
    return "**0.00**" if value == 0 else f"{value:.2f}"  # a zero spread is the finding


def laptop_table() -> str:
    """One row per group the reference trained: ours (the paper's 20M-step value)."""
    with open(REPORTS / "table1.csv", newline="") as f:
        cells = {(row["metric"], row["group"]): row for row in csv.DictReader(f)}
    device = json.loads((REPORTS / "replicability.json").read_text())["device"]
    labels = device.get("group_labels", {})  # older reports: plain group names
    rows = ["| group | best | std (best) | final | std (final) |", "|---|---|---|---|---|"]
    for group in GROUP_NAMES:
        row = [cells[(metric, group)] for metric in COLUMNS]
        if not all(cell["ours"] for cell in row):
            continue  # a group the study left out
        values = [f"{_ours(float(c['ours']))} ({float(c['paper']):.1f})" for c in row]
        rows.append(f"| {labels.get(group, group)} | " + " | ".join(values) + " |")
    return "\n".join(rows) + "\n"


def readme_with_table(text: str) -> str:
    return TABLE1.sub(lambda m: m.group(1) + laptop_table() + m.group(3), text)


if __name__ == "__main__":
    README.write_text(readme_with_table(README.read_text()))
