"""How a universal run names its numerics in its records: each chain line, each checkpoint's
metadata and the conditions carry the mode and the spec's version; a standard run's records
carry neither, as before the mode existed."""

from __future__ import annotations

from reprodqn.universal.reference import SPEC_VERSION


def universal_record(numerics: str) -> dict[str, str]:
    """{'numerics': 'universal', 'numerics_spec': version} in the universal mode; {} else."""
    if numerics != "universal":
        return {}
    return {"numerics": "universal", "numerics_spec": SPEC_VERSION}
