"""Fusion and metrics on hand-made rankings with known answers."""

from __future__ import annotations

import math
import time

import pytest

from retrieval_assets.core.evaluation.metrics import evaluate, latency_percentiles, score_run
from retrieval_assets.core.retrieval.fusion import (
    fuse,
    normalized_score_fusion,
    reciprocal_rank_fusion,
    similarity_rrf_fusion,
)
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter, matches_all, parse_filters

# Two strategies with scores on different scales; "c" is only in bm25, "d" only in dense.
PER_STRATEGY = {
    "bm25": [("a", 12.0), ("b", 8.0), ("c", 4.0)],
    "dense": [("b", 0.9), ("a", 0.7), ("d", 0.5)],
}


def test_rrf_matches_the_formula() -> None:
    fused = dict(reciprocal_rank_fusion({"bm25": ["a", "b"], "dense": ["b", "c"]}, k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    assert [key for key, _ in reciprocal_rank_fusion({"x": ["a", "b"], "y": ["b", "c"]})] == ["b", "a", "c"]


def test_rrf_breaks_ties_by_key_and_rejects_bad_k() -> None:
    assert [k for k, _ in reciprocal_rank_fusion({"x": ["b"], "y": ["a"]})] == ["a", "b"]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"x": ["a"]}, k=0)


def test_weighted_rrf() -> None:
    fused = dict(reciprocal_rank_fusion({"bm25": ["a"], "dense": ["b"]}, k=60, weights={"bm25": 2.0}))
    assert fused == {"a": pytest.approx(2 / 61), "b": pytest.approx(1 / 61)}
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"x": ["a"]}, weights={"x": -1.0})


def test_minmax_fusion_known_values() -> None:
    # bm25 normalises to a=1, b=0.5, c=0; dense to b=1, a=0.5, d=0; missing counts as 0.
    fused = dict(normalized_score_fusion(PER_STRATEGY, "minmax"))
    assert fused == {"a": pytest.approx(1.5), "b": pytest.approx(1.5), "c": 0.0, "d": 0.0}
    assert [k for k, _ in normalized_score_fusion(PER_STRATEGY, "minmax")] == ["a", "b", "c", "d"]
    weighted = normalized_score_fusion(PER_STRATEGY, "minmax", weights={"dense": 3.0})
    assert weighted[0] == ("b", pytest.approx(0.5 + 3.0))


def test_zscore_fusion_known_values() -> None:
    fused = dict(normalized_score_fusion(PER_STRATEGY, "zscore"))
    z = math.sqrt(1.5)  # the standardised scores of three evenly spaced values are -1.22, 0, 1.22
    assert fused["a"] == pytest.approx(z + 0.0)
    assert fused["b"] == pytest.approx(0.0 + z)
    # A candidate a strategy did not return gets that strategy's lowest z.
    assert fused["c"] == pytest.approx(-z - z)
    assert fused["d"] == pytest.approx(-z - z)


def test_normalisation_of_a_single_or_constant_list() -> None:
    assert normalized_score_fusion({"x": [("a", 3.0)]}, "minmax") == [("a", 1.0)]
    assert normalized_score_fusion({"x": [("a", 2.0), ("b", 2.0)]}, "zscore") == [("a", 0.0), ("b", 0.0)]
    assert normalized_score_fusion({"x": [], "y": [("a", 1.0)]}, "minmax") == [("a", 1.0)]


def test_similarity_rrf_hybrid_known_values() -> None:
    w = 0.4
    fused = dict(similarity_rrf_fusion(PER_STRATEGY, similarity_weight=w, k=60))
    rrf = {"a": 1 / 61 + 1 / 62, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 63}
    similarity = {"a": 1.5 / 2, "b": 1.5 / 2, "c": 0.0, "d": 0.0}
    best = max(rrf.values())
    for key in rrf:
        assert fused[key] == pytest.approx(w * similarity[key] + (1 - w) * rrf[key] / best)
    assert dict(similarity_rrf_fusion(PER_STRATEGY, 0.0)) == pytest.approx({k: v / best for k, v in rrf.items()})
    with pytest.raises(ValueError):
        similarity_rrf_fusion(PER_STRATEGY, 1.5)


# Worked example for the hand-computed fusion checks below: bm25 ranks a, b, c; dense ranks b, d, a.
# Both lists are evenly spaced, so min-max gives 1, 0.5, 0 and z-score gives +Z, 0, -Z with
# Z = sqrt(1.5) = 1.224745 (population std of three evenly spaced values is sqrt(2/3) of the step).
WORKED = {
    "bm25": [("a", 10.0), ("b", 6.0), ("c", 2.0)],
    "dense": [("b", 0.9), ("d", 0.5), ("a", 0.1)],
}
Z = 1.224745


@pytest.mark.parametrize(
    ("method", "options", "expected"),
    [
        pytest.param(
            "rrf",
            {},
            # k=60, 1-based ranks: a = 1/61 + 1/63, b = 1/62 + 1/61, c = 1/63, d = 1/62
            [("b", 0.016129 + 0.016393), ("a", 0.016393 + 0.015873), ("d", 0.016129), ("c", 0.015873)],
            id="rrf",
        ),
        pytest.param(
            "rrf",
            {"weights": {"bm25": 2.0}},
            # bm25 counts twice: a = 2/61 + 1/63 = 0.048660, b = 2/62 + 1/61 = 0.048652,
            # c = 2/63 = 0.031746, d = 1/62 = 0.016129 (the weight puts a ahead of b)
            [("a", 0.048660), ("b", 0.048652), ("c", 0.031746), ("d", 0.016129)],
            id="rrf-weighted",
        ),
        pytest.param(
            "minmax",
            {},
            # bm25 a=1 b=0.5 c=0; dense b=1 d=0.5 a=0; missing counts 0:
            # a = 1 + 0, b = 0.5 + 1, c = 0 + 0, d = 0 + 0.5
            [("b", 1.5), ("a", 1.0), ("d", 0.5), ("c", 0.0)],
            id="minmax",
        ),
        pytest.param(
            "minmax",
            {"weights": {"dense": 3.0}},
            # a = 1 + 3*0, b = 0.5 + 3*1, c = 0 + 3*0 (missing), d = 0 (missing) + 3*0.5
            [("b", 3.5), ("d", 1.5), ("a", 1.0), ("c", 0.0)],
            id="minmax-weighted",
        ),
        pytest.param(
            "zscore",
            {},
            # bm25 a=+Z b=0 c=-Z; dense b=+Z d=0 a=-Z; missing counts as the list's lowest z, -Z:
            # a = Z - Z = 0, b = 0 + Z, c = -Z + -Z (missing), d = -Z (missing) + 0
            [("b", Z), ("a", 0.0), ("d", -Z), ("c", -2 * Z)],
            id="zscore",
        ),
        pytest.param(
            "zscore",
            {"weights": {"dense": 3.0}},
            # a = Z + 3*(-Z) = -2Z, b = 0 + 3Z, c = -Z + 3*(-Z) = -4Z, d = -Z + 3*0 = -Z
            [("b", 3.674235), ("d", -1.224745), ("a", -2.449490), ("c", -4.898979)],
            id="zscore-weighted",
        ),
        pytest.param(
            "similarity_rrf",
            {},
            # w = 0.5; similarity = min-max sum / total weight 2: a=0.5 b=0.75 c=0 d=0.25;
            # rrf / best rrf (b = 0.032522): a = 0.032266/0.032522 = 0.992128, b = 1,
            # c = 0.015873/0.032522 = 0.488063, d = 0.016129/0.032522 = 0.495935;
            # fused = 0.5*sim + 0.5*rrf: a = 0.25 + 0.496064, b = 0.375 + 0.5, c = 0 + 0.244031, d = 0.125 + 0.247968
            [("b", 0.875), ("a", 0.746064), ("d", 0.372967), ("c", 0.244031)],
            id="similarity_rrf",
        ),
        pytest.param(
            "similarity_rrf",
            {"similarity_weight": 0.8},
            # same terms, w = 0.8: a = 0.8*0.5 + 0.2*0.992128 = 0.598426, b = 0.8*0.75 + 0.2 = 0.8,
            # c = 0 + 0.2*0.488063 = 0.097613, d = 0.8*0.25 + 0.2*0.495935 = 0.299187
            [("b", 0.8), ("a", 0.598426), ("d", 0.299187), ("c", 0.097613)],
            id="similarity_rrf-w0.8",
        ),
        pytest.param(
            "similarity_rrf",
            {"weights": {"bm25": 2.0}},
            # weighted min-max sum / total weight 3: a = (2*1 + 0)/3 = 0.666667, b = (2*0.5 + 1)/3 = 0.666667,
            # c = 0, d = (0 + 0.5)/3 = 0.166667; weighted rrf / best (a = 0.048660): a = 1,
            # b = 0.048652/0.048660 = 0.999827, c = 0.031746/0.048660 = 0.652406, d = 0.016129/0.048660 = 0.331465;
            # fused = 0.5*sim + 0.5*rrf: a = 0.333333 + 0.5, b = 0.333333 + 0.499914,
            # c = 0 + 0.326203, d = 0.083333 + 0.165732
            [("a", 0.833333), ("b", 0.833247), ("c", 0.326203), ("d", 0.249066)],
            id="similarity_rrf-weighted",
        ),
    ],
)
def test_fuse_computes_each_method_by_hand(method: str, options: dict, expected: list[tuple[str, float]]) -> None:
    fused = fuse(WORKED, method, rrf_k=60, **options)  # type: ignore[arg-type]
    assert [key for key, _ in fused] == [key for key, _ in expected]
    assert [score for _, score in fused] == pytest.approx([score for _, score in expected], abs=2e-6)


def test_fuse_rejects_an_unknown_method() -> None:
    with pytest.raises(ValueError):
        fuse(PER_STRATEGY, "borda")  # type: ignore[arg-type]


def test_metrics_known_values() -> None:
    scores = score_run({"q1": ["a", "b", "c"], "q2": []}, {"q1": {"b": 1}, "q2": {"x": 1}})
    assert scores["q1"]["ndcg@10"] == pytest.approx(1 / math.log2(3))
    assert scores["q1"]["mrr@10"] == pytest.approx(0.5)
    assert scores["q1"]["recall@100"] == 1.0
    assert scores["q2"] == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_mrr_is_cut_at_ten() -> None:
    run = {"q": [f"d{i}" for i in range(20)]}
    assert score_run(run, {"q": {"d12": 1}})["q"]["mrr@10"] == 0.0
    assert score_run(run, {"q": {"d9": 1}})["q"]["mrr@10"] == pytest.approx(0.1)


def test_latency_percentiles_known_values() -> None:
    # Linear interpolation between order statistics (numpy's default), ranks counted from 0:
    # p50 of 10..50 is the value at rank 0.5*4 = 2 -> 30; p95 at rank 0.95*4 = 3.8 -> 40 + 0.8*(50-40) = 48.
    assert latency_percentiles([30.0, 10.0, 50.0, 20.0, 40.0]) == pytest.approx({"p50_ms": 30.0, "p95_ms": 48.0})
    # Four values: p50 at rank 1.5 -> 2 + 0.5*(3-2) = 2.5; p95 at rank 2.85 -> 3 + 0.85*(100-3) = 85.45.
    assert latency_percentiles([1.0, 2.0, 3.0, 100.0]) == pytest.approx({"p50_ms": 2.5, "p95_ms": 85.45})
    assert latency_percentiles([7.0]) == {"p50_ms": 7.0, "p95_ms": 7.0}
    assert latency_percentiles([]) == {"p50_ms": 0.0, "p95_ms": 0.0}


def test_evaluate_reports_latency_and_progress() -> None:
    seen = []
    inner_ms: dict[str, float] = {}

    def search(query: str) -> list[str]:
        # The time spent inside the search, measured here: evaluate's figure must include it.
        started = time.perf_counter()
        sum(range(20_000))
        inner_ms[query] = (time.perf_counter() - started) * 1000
        return ["a"] if query == "find a" else ["z"]

    started = time.perf_counter()
    report = evaluate(
        search,
        {"q1": "find a", "q2": "find b", "unjudged": "x"},
        {"q1": {"a": 1}, "q2": {"b": 1}},
        progress=lambda done, total: seen.append((done, total)),
    )
    outer_ms = (time.perf_counter() - started) * 1000
    assert report.queries == 2 and seen == [(1, 2), (2, 2)]
    assert report.metrics["ndcg@10"] == pytest.approx(0.5)
    latencies = {q.query_id: q.latency_ms for q in report.per_query}
    assert set(latencies) == {"q1", "q2"} and "x" not in inner_ms
    # Each per-query latency is in milliseconds, covers the search call and fits within the whole run.
    assert latencies["q1"] >= inner_ms["find a"] > 0 and latencies["q2"] >= inner_ms["find b"] > 0
    assert sum(latencies.values()) <= outer_ms
    # The reported percentiles are those of exactly these latencies (two values: linear interpolation).
    low, high = sorted(latencies.values())
    assert report.metrics["p50_ms"] == pytest.approx(low + 0.5 * (high - low))
    assert report.metrics["p95_ms"] == pytest.approx(low + 0.95 * (high - low))


def test_filter_parsing_and_matching() -> None:
    filters = parse_filters({"tenant_id": "acme", "license": ["MIT", "GPL"], "year": {"gte": 2019}})
    assert matches_all({"tenant_id": "acme", "license": "MIT", "year": 2020}, filters)
    assert not matches_all({"tenant_id": "acme", "license": "MIT", "year": 2018}, filters)
    assert not matches_all({"tenant_id": "other", "license": "MIT", "year": 2020}, filters)
    assert MetadataFilter(field="topics", any_of=["x"]).matches({"topics": ["y", "x"]})
    for bad in ({"year": {"after": 3}}, {"x": []}, {"x": {"nested": {}}}, "tenant=acme", {"x": None}):
        with pytest.raises(FilterError):
            parse_filters(bad)
