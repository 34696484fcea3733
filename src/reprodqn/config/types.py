"""The building blocks of params.yaml's schema: frozen, strict models that refuse unknown
keys, NaN and infinities, and the constrained number types the sections share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveInt = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
