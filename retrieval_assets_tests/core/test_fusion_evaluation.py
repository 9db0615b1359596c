"""Fusion and metrics on hand-made rankings with known answers."""

from __future__ import annotations

import math

import pytest

from retrieval_assets.core.evaluation import evaluate, latency_percentiles, score_run
from retrieval_assets.core.filters import FilterError, MetadataFilter, matches_all, parse_filters
from retrieval_assets.core.retrieval.fusion import reciprocal_rank_fusion


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
