"""`make docs-tables`: the command-line page's list of every `reprodqn` subcommand, from the
parser's own help strings, and which of them take `--params`/`--set`."""

from __future__ import annotations

import argparse
import re

from reprodqn.cli.main import build_parser
from tools.package_graph import ROOT

PAGE = ROOT / "docs" / "cli.md"
COMMAND_TABLE = re.compile(r"(<!-- commands -->\n)(.*?)(<!-- /commands -->)", re.S)


def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, str, bool]]:
    """(command, help, takes --params) for every leaf subcommand, nested ones included."""
    found = []
    for action in parser._actions:  # argparse keeps its subcommands only here
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, child in action.choices.items():
            command = f"{prefix}{name}"
            nested = subcommands(child, f"{command} ")
            if nested:
                found += nested
                continue
            options = {option for a in child._actions for option in a.option_strings}
            found.append((command, helps[name], "--params" in options))
    return found


def command_table() -> str:
    commands = subcommands(build_parser())
    rows = ["| command | what it does |", "|---|---|"]
    rows += [f"| `reprodqn {command}` | {text} |" for command, text, _ in commands]
    without = [f"`{command}`" for command, _, takes in commands if not takes]
    but = f" but {', '.join(without)}" if without else ""
    rows += [
        "",
        f"Every subcommand{but} takes `--params PATH` (default `params.yaml`) and repeatable",
        "`--set key.path=value`. Bad input to any of them is one line naming the field or",
        "file, exit code 2.",
        "",
    ]
    return "\n".join(rows)


def page_with_table(text: str) -> str:
    return COMMAND_TABLE.sub(lambda m: m.group(1) + command_table() + m.group(3), text)


if __name__ == "__main__":
    PAGE.write_text(page_with_table(PAGE.read_text()))
