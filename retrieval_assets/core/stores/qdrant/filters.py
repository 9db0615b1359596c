"""Qdrant filters: our ``MetadataFilter`` list as one Qdrant ``Filter``, for either type library.

``translate`` turns the filters into library-neutral conditions once; ``build_filter`` spells
them with one library's objects, named by a ``ConditionTypes`` (qdrant-edge-py's for the
embedded shard in ``edge``, qdrant-client's ``models`` for the server in ``server``). All
filters must hold (``must``); a filter whose values are of mixed kinds becomes a ``should`` of
one condition per kind, since a ``MatchAny`` takes only strings or only integers and no
floats (a float value is a one-point range).

Booleans follow what each store's payload holds (``BooleanStorage``):
- ``"json"`` (server): payloads keep JSON booleans, matched with ``MatchValue`` per value.
- ``"keyword"`` (edge): qdrant-edge-py 0.9.0 turns ``MatchValue(True)`` into the integer 1,
  which never matches a boolean payload, so the edge store writes fields declared ``bool`` as
  the keywords "true"/"false" and matches those; a boolean filter on an undeclared field is an
  error there, since its payloads hold raw booleans nothing can match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    FieldType,
    coerce_filter_values,
)
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter

BooleanStorage = Literal["json", "keyword"]
BOOL_KEYWORDS = {True: "true", False: "false"}


@dataclass(frozen=True)
class MatchAny:
    """The payload at ``key`` holds one of ``values`` (all strings or all integers)."""

    key: str
    values: list[str] | list[int]


@dataclass(frozen=True)
class MatchBool:
    """The payload at ``key`` holds the JSON boolean ``value``."""

    key: str
    value: bool


@dataclass(frozen=True)
class Range:
    """The payload at ``key`` holds a number within the inclusive bounds (None: unbounded)."""

    key: str
    gte: float | None
    lte: float | None


FieldMatch = MatchAny | MatchBool | Range


@dataclass(frozen=True)
class AnyOf:
    """At least one of ``conditions`` holds (a filter with values of several kinds)."""

    conditions: tuple[FieldMatch, ...]


Condition = FieldMatch | AnyOf
FieldConditionT = TypeVar("FieldConditionT")
FilterT = TypeVar("FilterT")


@dataclass(frozen=True)
class ConditionTypes(Generic[FieldConditionT, FilterT]):
    """How one Qdrant type library spells each condition; ``match_bool`` None: its store keeps
    booleans as keywords."""

    match_any: Callable[[str, list[str] | list[int]], FieldConditionT]
    match_bool: Callable[[str, bool], FieldConditionT] | None
    range: Callable[[str, float | None, float | None], FieldConditionT]
    must: Callable[[list[FieldConditionT | FilterT]], FilterT]
    should: Callable[[list[FieldConditionT]], FilterT]

    @property
    def booleans(self) -> BooleanStorage:
        return "json" if self.match_bool is not None else "keyword"


def build_filter(
    filters: Sequence[MetadataFilter],
    field_types: Mapping[str, FieldType],
    types: ConditionTypes[FieldConditionT, FilterT],
) -> FilterT | None:
    """The Qdrant ``Filter`` of ``filters`` in ``types``' library; None without filters."""
    if not filters:
        return None
    return types.must([_spell(condition, types) for condition in translate(filters, field_types, types.booleans)])


def translate(
    filters: Sequence[MetadataFilter], field_types: Mapping[str, FieldType], booleans: BooleanStorage
) -> list[Condition]:
    """One condition per filter, all of which must hold; ``FilterError`` for a filter that
    cannot be expressed (a range on a keyword or bool field, an unmatchable boolean)."""
    return [_condition(flt, _field_type(flt.field, field_types), booleans) for flt in filters]


def payload_key(field: str) -> str:
    """A payload key as Qdrant's JSON path: plain identifiers as they are, others quoted, so
    that a flattened catalog key such as ``relations.requires`` is one key, not a nested path."""
    if field and all(ch.isalnum() or ch in "_-" for ch in field):
        return field
    if '"' in field or not field:
        raise FilterError(f"payload key {field!r} cannot be addressed in Qdrant (it contains a double quote)")
    return f'"{field}"'


def _field_type(field: str, field_types: Mapping[str, FieldType]) -> FieldType | None:
    return "keyword" if field in KEYWORD_PAYLOAD_FIELDS else field_types.get(field)


def _condition(flt: MetadataFilter, field_type: FieldType | None, booleans: BooleanStorage) -> Condition:
    key = payload_key(flt.field)
    if flt.any_of is None:
        if field_type in ("keyword", "bool"):
            raise FilterError(f"range filter on {flt.field!r}, a {field_type} field")
        return Range(key, flt.gte, flt.lte)
    values = coerce_filter_values(flt, field_type)
    if booleans == "keyword" and any(isinstance(value, bool) for value in values):
        if field_type != "bool":
            raise FilterError(
                f"boolean filter on {flt.field!r}: declare it as 'bool' in field_types at create "
                "(qdrant-edge cannot match raw boolean payloads)"
            )
        values = [BOOL_KEYWORDS[bool(value)] for value in values]
    strings = [v for v in values if isinstance(v, str)]
    integers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    matches: list[FieldMatch] = []
    if strings:
        matches.append(MatchAny(key, strings))
    if integers:
        matches.append(MatchAny(key, integers))
    matches += [MatchBool(key, v) for v in dict.fromkeys(v for v in values if isinstance(v, bool))]
    matches += [Range(key, v, v) for v in values if isinstance(v, float)]
    return matches[0] if len(matches) == 1 else AnyOf(tuple(matches))


def _spell(
    condition: Condition, types: ConditionTypes[FieldConditionT, FilterT]
) -> FieldConditionT | FilterT:
    if isinstance(condition, AnyOf):
        return types.should([_spell_match(match, types) for match in condition.conditions])
    return _spell_match(condition, types)


def _spell_match(match: FieldMatch, types: ConditionTypes[FieldConditionT, FilterT]) -> FieldConditionT:
    if isinstance(match, MatchAny):
        return types.match_any(match.key, match.values)
    if isinstance(match, MatchBool):
        assert types.match_bool is not None, "translate spells booleans as keywords for this library"
        return types.match_bool(match.key, match.value)
    return types.range(match.key, match.gte, match.lte)
