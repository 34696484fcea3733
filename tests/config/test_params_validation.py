"""Every input params.yaml can hold is validated once, at load, for every group: each leaf
of each section, at the top level and in every group's `set`, mutated to a wrong type, an
out-of-range number, NaN or an unknown key, is refused with one line naming it."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import typing

import pytest
import yaml
from annotated_types import Ge, Gt, Le, Lt

from reprodqn.config.params import RUN_SECTIONS, Params, load_params
from reprodqn.core.errors import InputError
from tests.helpers import PARAMS, cli_env

SECTIONS = (
    "env",
    "agent",
    "replay",
    "train",
    "seeds",
    "compute",
    "priority",
    "evaluation",
    "start_states",
    "ranker",
)


def leaves() -> list[tuple[str, str, object]]:
    """(section, key, field info) for every leaf of the params models."""
    found = []
    for section in SECTIONS:
        model = typing.get_type_hints(Params)[section]
        found += [(section, key, info) for key, info in model.model_fields.items()]
    return found


def bad_values(info) -> list[tuple[str, object]]:
    """Values the field's type or range must refuse."""
    kind = info.annotation
    values: list[tuple[str, object]] = []
    if kind is bool:
        values += [("text for a bool", "maybe"), ("a number for a bool", 2)]
    elif kind in (int, float):
        values += [("text for a number", "many"), ("NaN", math.nan)]
        if kind is int:
            values.append(("a fraction for an int", 1.5))
    elif typing.get_origin(kind) is typing.Literal:
        values.append(("a value outside the choices", "no-such-choice"))
    else:  # str, str | None
        values.append(("a number for text", 7))
    for bound in info.metadata:
        if isinstance(bound, Ge | Gt):
            values.append(
                (
                    "below the range",
                    (bound.ge if isinstance(bound, Ge) else bound.gt)
                    - (1 if kind is int else 1e-3),
                )
            )
        if isinstance(bound, Le | Lt):
            values.append(
                (
                    "above the range",
                    (bound.le if isinstance(bound, Le) else bound.lt)
                    + (1 if kind is int else 1e-3),
                )
            )
    return values


def mutations() -> list[tuple[str, dict]]:
    """(label, overlay) pairs: each one bad leaf at the top level or in one group's set."""
    raw = yaml.safe_load(PARAMS.read_text())
    found = []
    for section, key, info in leaves():
        for why, value in bad_values(info):
            found.append((f"{section}.{key} = {value!r} ({why})", {section: {key: value}}))
            if section in RUN_SECTIONS:
                for group in raw["study"]["groups"]:
                    found.append(
                        (
                            f"study.groups.{group}.set.{section}.{key} = {value!r} ({why})",
                            {"study": {"groups": {group: {"set": {f"{section}.{key}": value}}}}},
                        )
                    )
        found.append((f"{section}.no_such_key (unknown)", {section: {"no_such_key": 1}}))
    for group in raw["study"]["groups"]:
        found.append(
            (
                f"study.groups.{group}.set.agent.no_such_key (unknown)",
                {"study": {"groups": {group: {"set": {"agent.no_such_key": 1}}}}},
            )
        )
    return found


MUTATIONS = mutations()


BASE = yaml.safe_load(PARAMS.read_text())


def merged(overlay: dict) -> dict:
    raw = copy.deepcopy(BASE)

    def merge(into, layer):
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    merge(raw, overlay)
    return raw


def test_the_unmutated_params_are_accepted():
    assert load_params(PARAMS).study.groups  # the positive control


def test_every_mutated_leaf_is_refused_with_one_line_naming_it(tmp_path):
    accepted = []
    for label, overlay in MUTATIONS:
        path = tmp_path / "params.yaml"
        path.write_text(yaml.dump(merged(overlay), Dumper=yaml.CSafeDumper))  # 1,470 files
        try:
            load_params(path)
        except InputError as error:
            message = str(error)
            key = label.split(" ", 1)[0].rsplit(".", 1)[-1]
            assert "\n" not in message and key in message, (label, message)
        else:
            accepted.append(label)
    assert not accepted, f"{len(accepted)} of {len(MUTATIONS)} bad inputs accepted: {accepted}"
    assert len(MUTATIONS) > 400  # every leaf, at the top level and in every group's set


@pytest.mark.parametrize(
    "label, overlay",
    [m for m in MUTATIONS if ".set." in m[0]][::97],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_train_of_another_group_refuses_a_bad_group_value(tmp_path, label, overlay):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(merged(overlay)))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "train",
            "--group",
            "deterministic",
            "--run",
            "0",
            "--params",
            str(path),
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert label.split(" ", 1)[0].rsplit(".", 1)[-1] in result.stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was written
