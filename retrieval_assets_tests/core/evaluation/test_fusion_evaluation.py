"""Fusion and metrics on hand-made rankings with known answers."""

from __future__ import annotations

import math

import pytest

from retrieval_assets.core.evaluation.metrics import evaluate, latency_percentiles, score_run
from retrieval_assets.core.stores.filters import FilterError, MetadataFilter, matches_all, parse_filters
from retrieval_assets.core.retrieval.fusion import (
    fuse,
    normalized_score_fusion,
    reciprocal_rank_fusion,
    similarity_rrf_fusion,
)

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


@pytest.mark.parametrize("method", ["rrf", "minmax", "zscore", "similarity_rrf"])
def test_fuse_dispatches_every_method(method: str) -> None:
    fused = fuse(PER_STRATEGY, method)  # type: ignore[arg-type]
    assert {k for k, _ in fused} == {"a", "b", "c", "d"}
    assert [score for _, score in fused] == sorted((score for _, score in fused), reverse=True)
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


def test_evaluate_reports_latency_and_progress() -> None:
    seen = []
    report = evaluate(
        lambda q: ["a"] if q == "find a" else ["z"],
        {"q1": "find a", "q2": "find b", "unjudged": "x"},
        {"q1": {"a": 1}, "q2": {"b": 1}},
        progress=lambda done, total: seen.append((done, total)),
    )
    assert report.queries == 2 and seen == [(1, 2), (2, 2)]
    assert report.metrics["ndcg@10"] == pytest.approx(0.5)
    assert report.metrics["p95_ms"] >= report.metrics["p50_ms"] >= 0
    assert latency_percentiles([]) == {"p50_ms": 0.0, "p95_ms": 0.0}


def test_filter_parsing_and_matching() -> None:
    filters = parse_filters({"tenant_id": "acme", "license": ["MIT", "GPL"], "year": {"gte": 2019}})
    assert matches_all({"tenant_id": "acme", "license": "MIT", "year": 2020}, filters)
    assert not matches_all({"tenant_id": "acme", "license": "MIT", "year": 2018}, filters)
    assert not matches_all({"tenant_id": "other", "license": "MIT", "year": 2020}, filters)
    assert MetadataFilter(field="topics", any_of=["x"]).matches({"topics": ["y", "x"]})
    for bad in ({"year": {"after": 3}}, {"x": []}, {"x": {"nested": {}}}, "tenant=acme", {"x": None}):
        with pytest.raises(FilterError):
            parse_filters(bad)
