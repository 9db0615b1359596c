"""Structured metadata filters, pushed down into every backend.

A filter spec is a mapping such as ``{"tenant_id": "acme", "license": ["MIT", "GPL-3.0"],
"year": {"gte": 2019}}``: a scalar means equality, a list means "any of", and a dict
with ``gte``/``lte`` means an inclusive numeric range. Every backend translates the same
``MetadataFilter`` list into its native filter (Qdrant ``Filter``, tantivy boolean query,
FAISS ``IDSelector``) so results are filtered before top-k, never after.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError, model_validator

Scalar = str | int | float | bool


class FilterError(ValueError):
    """A filter spec that cannot be understood."""


class MetadataFilter(BaseModel):
    field: str
    any_of: list[Scalar] | None = None
    gte: float | None = None
    lte: float | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> MetadataFilter:
        is_set = self.any_of is not None
        is_range = self.gte is not None or self.lte is not None
        if is_set == is_range:
            raise FilterError("needs either values or a gte/lte range")
        if is_set and not self.any_of:
            raise FilterError("the value list is empty")
        if any(bound is not None and not math.isfinite(bound) for bound in (self.gte, self.lte)):
            raise FilterError("range bounds must be finite numbers")
        return self

    def matches(self, payload: Mapping[str, Any]) -> bool:
        """In-memory evaluation, for stores without native filtering (FAISS id selection)."""
        value = payload.get(self.field)
        if value is None:
            return False
        values = value if isinstance(value, (list, tuple)) else [value]
        if self.any_of is not None:
            wanted = {str(v) for v in self.any_of}
            return any(str(v) in wanted for v in values)
        for v in values:
            try:
                number = float(v)
            except (TypeError, ValueError):
                continue
            if (self.gte is None or number >= self.gte) and (self.lte is None or number <= self.lte):
                return True
        return False


def parse_filters(spec: Mapping[str, Any] | Sequence[MetadataFilter] | None) -> list[MetadataFilter]:
    """Turn a user-facing filter mapping into ``MetadataFilter`` objects, with clear errors."""
    if spec is None:
        return []
    if isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)):
        return list(spec)
    if not isinstance(spec, Mapping):
        raise FilterError(f"filters must be a mapping of field to value, got {type(spec).__name__}")
    filters = []
    for field, value in spec.items():
        if not isinstance(field, str) or not field:
            raise FilterError(f"filter field names must be non-empty strings, got {field!r}")
        if isinstance(value, Mapping):
            unknown = set(value) - {"gte", "lte"}
            if unknown:
                raise FilterError(f"filter on {field!r}: unknown range keys {sorted(unknown)}; use gte/lte")
            filters.append(_make_filter(field, gte=value.get("gte"), lte=value.get("lte")))
        elif isinstance(value, (list, tuple, set)):
            filters.append(_make_filter(field, any_of=list(value)))
        elif isinstance(value, (str, int, float, bool)):
            filters.append(_make_filter(field, any_of=[value]))
        else:
            raise FilterError(f"filter on {field!r}: unsupported value {value!r}")
    return filters


def _make_filter(field: str, **spec: Any) -> MetadataFilter:
    try:
        return MetadataFilter(field=field, **spec)
    except ValidationError as exc:
        reasons = "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())
        raise FilterError(f"filter on {field!r}: {reasons}") from None


def matches_all(payload: Mapping[str, Any], filters: Sequence[MetadataFilter]) -> bool:
    return all(f.matches(payload) for f in filters)
