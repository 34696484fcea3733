"""`make docs-tables`: the command-line page's list of every `reprodqn` subcommand, from the
parser's own help strings, which of them take `--params`/`--set`, and every option of
each, so that the page names every flag the parser has."""

from __future__ import annotations

import argparse
import re

from reprodqn.cli.main import build_parser
from tools.package_graph import ROOT

PAGE = ROOT / "docs" / "cli.md"
COMMAND_TABLE = re.compile(r"(<!-- commands -->\n)(.*?)(<!-- /commands -->)", re.S)
OPTION_LISTS = re.compile(r"(<!-- options -->\n)(.*?)(<!-- /options -->)", re.S)
SHARED = {"help", "params", "overrides"}  # every subcommand's, said once above


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


def leaf_parsers(parser: argparse.ArgumentParser, prefix: str = ""):
    """(command, its parser) for every leaf subcommand, in the order `subcommands` gives."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                nested = list(leaf_parsers(child, f"{prefix}{name} "))
                yield from nested or [(f"{prefix}{name}", child)]


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:  # a positional
        choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
        return f"`{action.metavar or choices or action.dest}`"
    if action.nargs == 0:  # a switch
        return f"`{', '.join(action.option_strings)}`"
    shown = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    if action.nargs == "?":
        shown = f"[{shown}]"
    return f"`{', '.join(action.option_strings)} {shown}`"


def _described(action: argparse.Action) -> str:
    """Its help, and its default where the help does not say it."""
    text = action.help or ""
    default = action.default
    shown = default is not None and default is not False and default not in ([], "")
    if shown and "default" not in text and action.option_strings:
        text += f"{' (' if text else ''}default: {default}{')' if text else ''}"
    return f": {text}" if text else ""


def option_lists() -> str:
    """Each subcommand's own arguments with their help, as the parser has them."""
    lines = []
    for command, child in leaf_parsers(build_parser()):
        own = [a for a in child._actions if a.dest not in SHARED]
        if not own:
            continue
        lines += [f"**`reprodqn {command}`**", ""]
        lines += [f"- {_argument(a)}" + _described(a) for a in own]
        lines.append("")
    return "\n".join(lines)


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
    text = COMMAND_TABLE.sub(lambda m: m.group(1) + command_table() + m.group(3), text)
    return OPTION_LISTS.sub(lambda m: m.group(1) + option_lists() + m.group(3), text)


if __name__ == "__main__":
    PAGE.write_text(page_with_table(PAGE.read_text()))
