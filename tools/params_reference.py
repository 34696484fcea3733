"""`make docs-tables`: the documentation site's parameter reference (docs/parameters.md),
from the params models' descriptions and params.yaml's source comments."""

from __future__ import annotations

from reprodqn.config.explain import reference_page
from reprodqn.config.params import load_params
from tools.package_graph import ROOT

PAGE = ROOT / "docs" / "parameters.md"


def parameters_page() -> str:
    params = ROOT / "params.yaml"
    return reference_page(load_params(params), params)


if __name__ == "__main__":
    PAGE.write_text(parameters_page())
