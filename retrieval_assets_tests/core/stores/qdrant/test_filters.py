"""The shared Qdrant filter translator: each filter's condition, for both type libraries.

The table pins what each store matches: the server keeps JSON booleans (``MatchValue``), the
edge shard keeps declared booleans as the keywords "true"/"false" and refuses a boolean filter
on an undeclared field; everything else is spelled alike in both libraries.
"""

from __future__ import annotations

from typing import Any

import pytest
import qdrant_edge as qe

from retrieval_assets.core.stores.filters import FilterError, parse_filters
from retrieval_assets.core.stores.qdrant.edge import EDGE_CONDITIONS
from retrieval_assets.core.stores.qdrant.filters import AnyOf, MatchAny, MatchBool, Range, build_filter, translate
from retrieval_assets.core.stores.qdrant.requests import SERVER_CONDITIONS
from retrieval_assets_tests.core.stores.server_inputs import FIELD_TYPES, FILTER_SPEC, as_json

TYPES = FIELD_TYPES | {"relations.requires": "keyword"}
REFUSED = "refused"


def keyword(key: str, *values: Any) -> dict[str, Any]:
    return {"key": key, "match": {"any": list(values)}}


def boolean(key: str, value: bool) -> dict[str, Any]:
    return {"key": key, "match": {"value": value}}


def point(key: str, value: float) -> dict[str, Any]:
    return {"key": key, "range": {"gte": value, "lte": value}}


# (filter spec, the server's condition, the edge shard's condition); REFUSED: a FilterError.
CASES: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "identifier": ({"section": "body"},) + (keyword("section", "body"),) * 2,
    "keyword set": ({"license": ["MIT", "GPL-3.0"]},) + (keyword("license", "MIT", "GPL-3.0"),) * 2,
    "integer from text": ({"year": "2019"},) + (keyword("year", 2019),) * 2,
    "range": ({"year": {"gte": 2015.5}},) + ({"key": "year", "range": {"gte": 2015.5}},) * 2,
    "float values": ({"stars": [4.5, "5"]},) + ({"should": [point("stars", 4.5), point("stars", 5.0)]},) * 2,
    "undeclared mixed": ({"extra": ["x", 3]},) + ({"should": [keyword("extra", "x"), keyword("extra", 3)]},) * 2,
    "dotted key quoted": ({"relations.requires": "samtools"},) + (keyword('"relations.requires"', "samtools"),) * 2,
    "bool from text": ({"open_source": "true"}, boolean("open_source", True), keyword("open_source", "true")),
    "bool either": (
        {"open_source": [True, False, True]},
        {"should": [boolean("open_source", True), boolean("open_source", False)]},
        keyword("open_source", "true", "false"),
    ),
    "bool undeclared": ({"flag": False}, boolean("flag", False), REFUSED),
    "bool on keyword": ({"license": True},) + (keyword("license", "True"),) * 2,
    "bool on integer": ({"year": True}, REFUSED, REFUSED),
    "range on bool": ({"open_source": {"gte": 1}}, REFUSED, REFUSED),
    "range on keyword": ({"license": {"lte": 1}}, REFUSED, REFUSED),
    "double quote in key": ({'say "hi"': "x"}, REFUSED, REFUSED),
}


def edge_json(node: Any) -> Any:
    """A qdrant-edge-py condition as the REST API's JSON (the shape qdrant-client's models dump)."""
    if isinstance(node, qe.Filter):
        return {part: [edge_json(c) for c in getattr(node, part)] for part in ("must", "should") if getattr(node, part)}
    json: dict[str, Any] = {"key": node.key}
    if isinstance(node.match, qe.MatchAny):
        json["match"] = {"any": list(node.match.value)}
    elif node.match is not None:
        json["match"] = {"value": node.match.value}
    if node.range is not None:
        json["range"] = {
            bound: getattr(node.range, bound) for bound in ("gte", "lte") if getattr(node.range, bound) is not None
        }
    return json


@pytest.mark.parametrize(("library", "spell"), [("server", as_json), ("edge", edge_json)])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_filter_becomes_one_condition_in_both_libraries(case, library, spell):
    spec, server, edge = CASES[case]
    expected = server if library == "server" else edge
    types = SERVER_CONDITIONS if library == "server" else EDGE_CONDITIONS
    filters = parse_filters({"tenant_id": "acme", **spec})
    if expected == REFUSED:
        with pytest.raises(FilterError):
            build_filter(filters, TYPES, types)
        return
    assert spell(build_filter(filters, TYPES, types)) == {"must": [keyword("tenant_id", "acme"), expected]}


def test_the_neutral_conditions_name_the_boolean_storage():
    filters = parse_filters({"open_source": [True, False], "stars": 4.5, "year": {"lte": 2020}})
    assert translate(filters, TYPES, "json") == [
        AnyOf((MatchBool("open_source", True), MatchBool("open_source", False))),
        Range("stars", 4.5, 4.5),
        Range("year", None, 2020.0),
    ]
    assert translate(filters, TYPES, "keyword")[0] == MatchAny("open_source", ["true", "false"])
    assert build_filter([], TYPES, EDGE_CONDITIONS) is None


def test_qdrant_filter_json_tenant_set_range_and_mixed_values():
    spec = {**FILTER_SPEC, "stars": [4.5, "5"], "relations.requires": "samtools", "extra": ["x", 3]}
    flt = build_filter(parse_filters(spec), FIELD_TYPES | {"relations.requires": "keyword"}, SERVER_CONDITIONS)
    assert as_json(flt) == {
        "must": [
            {"key": "tenant_id", "match": {"any": ["acme"]}},
            {"key": "license", "match": {"any": ["MIT", "GPL-3.0"]}},
            {"key": "year", "range": {"gte": 2015.5, "lte": 2020.0}},
            {"key": "open_source", "match": {"value": True}},
            {"should": [{"key": "stars", "range": {"gte": 4.5, "lte": 4.5}},
                        {"key": "stars", "range": {"gte": 5.0, "lte": 5.0}}]},
            {"key": '"relations.requires"', "match": {"any": ["samtools"]}},
            # Undeclared: values as given, strings and integers matched separately.
            {"should": [{"key": "extra", "match": {"any": ["x"]}}, {"key": "extra", "match": {"any": [3]}}]},
        ]
    }
    assert build_filter([], FIELD_TYPES, SERVER_CONDITIONS) is None
    with pytest.raises(FilterError, match="range filter"):
        build_filter(parse_filters({"license": {"gte": 1}}), FIELD_TYPES, SERVER_CONDITIONS)
    with pytest.raises(FilterError, match="double quote"):
        build_filter(parse_filters({'say "hi"': "x"}), {}, SERVER_CONDITIONS)
