"""The promotion gate's statistics: a paired test against the promoted version's per-query
scores, and a best-ever floor that a chain of small accepted drops cannot pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval_assets.core.evaluation.gate import GateSettings, decide
from retrieval_assets.core.index.versions import IndexVersions

SETTINGS = GateSettings(max_ndcg_drop=0.01, max_recall_drop=0.01)
RNG = np.random.default_rng(3)
PROMOTED_QUERIES = {f"q{i}": {"ndcg@10": float(x), "recall@100": 1.0} for i, x in enumerate(RNG.random(300))}


def _summary(per_query: dict[str, dict[str, float]]) -> dict[str, float]:
    return {
        "ndcg@10": float(np.mean([v["ndcg@10"] for v in per_query.values()])),
        "recall@100": float(np.mean([v["recall@100"] for v in per_query.values()])),
        "p95_ms": 20.0,
    }


def _decide(candidate_queries, best_ever=None):
    return decide(
        _summary(candidate_queries),
        _summary(PROMOTED_QUERIES),
        SETTINGS,
        candidate_queries=candidate_queries,
        promoted_queries=PROMOTED_QUERIES,
        best_ever=best_ever,
    )


def test_a_drop_inside_the_margin_but_on_a_few_queries_is_refused() -> None:
    # Ten queries lose 0.25 nDCG@10 each: the mean falls 0.0083, inside the 0.01 margin.
    candidate = {
        q: {**v, "ndcg@10": max(v["ndcg@10"] - 0.25, 0.0) if i < 10 else v["ndcg@10"]}
        for i, (q, v) in enumerate(PROMOTED_QUERIES.items())
    }
    decision = _decide(candidate)
    assert not decision.passed
    assert len(decision.reasons) == 1 and "ndcg@10 dropped significantly" in decision.reasons[0], decision.reasons
    assert decision.paired["ndcg@10"].losses == 10 and decision.paired["ndcg@10"].p_value < 0.05
    comparison = decision.comparison["ndcg@10"]
    assert comparison["ci_low"] <= comparison["ci_high"] < 0 and comparison["p_value"] < 0.05
    # The per-query table shows exactly the ten losses.
    assert sorted(row["query_id"] for row in decision.changes) == sorted(f"q{i}" for i in range(10))
    assert all(row["difference"] < 0 for row in decision.changes)


def test_noise_of_the_same_mean_passes() -> None:
    noise = RNG.normal(0, 0.03, len(PROMOTED_QUERIES))
    candidate = {
        q: {**v, "ndcg@10": v["ndcg@10"] + n}
        for (q, v), n in zip(PROMOTED_QUERIES.items(), noise - noise.mean(), strict=True)
    }
    decision = _decide(candidate)
    assert decision.passed, decision.reasons
    assert decision.paired["ndcg@10"].p_value > 0.05 and decision.changes


def test_small_accepted_drops_cannot_add_up_past_the_best_ever_floor(tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path)
    gold = "gold-fingerprint"
    accepted = []
    # Each candidate is 0.009 below the last promoted one: within the margin against its predecessor.
    for n, ndcg in enumerate((0.750, 0.741, 0.732)):
        version = versions.candidate(f"{n:016d}")
        versions.seal(version, f"{n:016d}")
        promoted = versions.promoted()
        previous = versions.pointer()["metrics"] if promoted else None
        best = versions.best_promoted(gold)
        decision = decide({"ndcg@10": ndcg, "recall@100": 0.97, "p95_ms": 20.0}, previous, SETTINGS, best_ever=best)
        if decision.passed:
            versions.promote(version, reason="gate", metrics={"ndcg@10": ndcg, "recall@100": 0.97}, gold=gold)
            accepted.append(ndcg)
    assert accepted == [0.750, 0.741], "the third drop passed: small drops added up past the margin"
    assert "below the best promoted ever 0.7500" in decision.reasons[0]
    # Promotions judged on other gold queries do not set this catalog's floor.
    assert versions.best_promoted("other-gold") == {}
