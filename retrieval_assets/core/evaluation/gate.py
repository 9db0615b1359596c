"""The promotion gate: a candidate serves only if its quality and latency pass.

Quality is judged three ways against what served before: a drop beyond the margin from the
promoted version, a drop beyond the margin from the best version ever promoted (so accepted
small drops cannot add up), and a statistically significant per-query drop (paired
randomization test) however small its mean, which catches a regression on a few queries that
hides inside the margin.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from retrieval_assets.core.evaluation.significance import (
    PairedDifference,
    is_significant_drop,
    paired_difference,
    per_query_changes,
    scores_of,
)

# Metrics the gate reads from an evaluation summary (``benchmark.summarize``).
QUALITY_METRICS = ("ndcg@10", "recall@100")
LATENCY_METRIC = "p95_ms"


class GateSettings(BaseModel):
    """Floors, allowed drops against the promoted version, and a latency budget.

    The floors are deliberately low: they catch a broken build (wrong model, empty text), while
    the drop margins catch a regression against whatever the catalog reached before.
    """

    min_ndcg_at_10: float = Field(0.1, ge=0.0, le=1.0, description="Least nDCG@10 a candidate may have.")
    min_recall_at_100: float = Field(0.3, ge=0.0, le=1.0, description="Least recall@100 a candidate may have.")
    max_ndcg_drop: float = Field(
        0.01, ge=0.0, description="Largest allowed absolute fall of nDCG@10 below the promoted version."
    )
    max_recall_drop: float = Field(
        0.01, ge=0.0, description="Largest allowed absolute fall of recall@100 below the promoted version."
    )
    p95_budget_ms: float = Field(1000.0, gt=0.0, description="Largest allowed P95 query latency, in milliseconds.")
    significance: float = Field(
        0.05, gt=0.0, lt=1.0,
        description="A per-query drop with a paired randomization p-value below this is refused, whatever its size.",
    )
    promote_without_gold: bool = Field(
        True, description="Promote a catalog without gold queries (which cannot be measured) on its checks alone."
    )

    def floors(self) -> dict[str, float]:
        return {"ndcg@10": self.min_ndcg_at_10, "recall@100": self.min_recall_at_100}

    def drops(self) -> dict[str, float]:
        return {"ndcg@10": self.max_ndcg_drop, "recall@100": self.max_recall_drop}


class GateDecision(BaseModel):
    passed: bool
    reasons: list[str]  # why it failed; empty when it passed
    # metric -> {"candidate", "promoted", "best_ever", "floor", "allowed_drop" / "budget"}: the side-by-side view.
    comparison: dict[str, dict[str, float | None]]
    # metric -> the per-query paired comparison with the promoted version, when both have per-query scores.
    paired: dict[str, PairedDifference] = Field(default_factory=dict)
    # The largest nDCG@10 losses and wins per query against the promoted version.
    changes: list[dict[str, float | str]] = Field(default_factory=list)


def decide(
    candidate: Mapping[str, float] | None,
    promoted: Mapping[str, float] | None,
    settings: GateSettings,
    *,
    candidate_queries: Mapping[str, Mapping[str, float]] | None = None,
    promoted_queries: Mapping[str, Mapping[str, float]] | None = None,
    best_ever: Mapping[str, float] | None = None,
    gold: str | None = None,
) -> GateDecision:
    """``candidate`` and ``promoted`` are evaluation summaries of the configuration each serves;
    ``candidate`` is None when there are no gold queries, ``promoted`` when nothing serves yet.
    ``*_queries`` are per-query scores (query id -> metric -> value) for the paired test, and
    ``best_ever`` the best value of each metric any promoted version reached on these gold queries.
    ``gold`` names the gold set and its tenant scope ("gold of tenant acme"): each quality reason
    starts with it, so a refusal says whose figures fell."""
    quality = f"{gold}: " if gold else ""
    if candidate is None:
        missing: list[str] = (
            [] if settings.promote_without_gold else ["no gold queries to evaluate the candidate with"]
        )
        return GateDecision(passed=not missing, reasons=missing, comparison={})
    reasons: list[str] = []
    comparison: dict[str, dict[str, float | None]] = {}
    paired: dict[str, PairedDifference] = {}
    for metric in QUALITY_METRICS:
        value, floor, drop = candidate[metric], settings.floors()[metric], settings.drops()[metric]
        before = promoted.get(metric) if promoted else None
        best = (best_ever or {}).get(metric)
        comparison[metric] = {
            "candidate": value, "promoted": before, "best_ever": best, "floor": floor, "allowed_drop": drop
        }
        if value < floor:
            reasons.append(f"{quality}{metric} {value:.4f} is below the floor {floor:.4f}")
        if before is not None and value < before - drop:
            reasons.append(f"{quality}{metric} {value:.4f} fell more than {drop:.4f} below the promoted {before:.4f}")
        if best is not None and value < best - drop:
            reasons.append(
                f"{quality}{metric} {value:.4f} fell more than {drop:.4f} below the best promoted ever {best:.4f}"
            )
        if candidate_queries and promoted_queries:
            difference = paired_difference(scores_of(candidate_queries, metric), scores_of(promoted_queries, metric))
            paired[metric] = difference
            comparison[metric] |= {
                "ci_low": difference.ci_low, "ci_high": difference.ci_high, "p_value": difference.p_value
            }
            if is_significant_drop(difference, settings.significance):
                reasons.append(
                    f"{quality}{metric} dropped significantly against the promoted version: "
                    f"mean {difference.mean:+.4f} over "
                    f"{difference.queries} queries ({difference.losses} worse, {difference.wins} better), "
                    f"p = {difference.p_value:.4f} < {settings.significance}"
                )
    p95 = candidate[LATENCY_METRIC]
    comparison[LATENCY_METRIC] = {
        "candidate": p95,
        "promoted": promoted.get(LATENCY_METRIC) if promoted else None,
        "budget": settings.p95_budget_ms,
    }
    if p95 > settings.p95_budget_ms:
        reasons.append(f"P95 {p95:.1f} ms is over the {settings.p95_budget_ms:.0f} ms budget")
    changes = (
        per_query_changes(scores_of(candidate_queries, "ndcg@10"), scores_of(promoted_queries, "ndcg@10"))
        if candidate_queries and promoted_queries
        else []
    )
    return GateDecision(passed=not reasons, reasons=reasons, comparison=comparison, paired=paired, changes=changes)
