"""The promotion gate: a candidate serves only if its quality and latency pass."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

# Metrics the gate reads from an evaluation summary (``benchmark.summarize``).
QUALITY_METRICS = ("ndcg@10", "recall@100")
LATENCY_METRIC = "p95_ms"


class GateSettings(BaseModel):
    """Floors, allowed drops against the promoted version, and a latency budget.

    The floors are deliberately low: they catch a broken build (wrong model, empty text), while
    the drop margins catch a regression against whatever the catalog reached before.
    """

    min_ndcg_at_10: float = Field(0.1, ge=0.0, le=1.0)
    min_recall_at_100: float = Field(0.3, ge=0.0, le=1.0)
    # Largest allowed absolute fall below the promoted version.
    max_ndcg_drop: float = Field(0.01, ge=0.0)
    max_recall_drop: float = Field(0.01, ge=0.0)
    p95_budget_ms: float = Field(1000.0, gt=0.0)
    # A catalog without gold queries cannot be measured; promote it on its checks alone?
    promote_without_gold: bool = True

    def floors(self) -> dict[str, float]:
        return {"ndcg@10": self.min_ndcg_at_10, "recall@100": self.min_recall_at_100}

    def drops(self) -> dict[str, float]:
        return {"ndcg@10": self.max_ndcg_drop, "recall@100": self.max_recall_drop}


class GateDecision(BaseModel):
    passed: bool
    reasons: list[str]  # why it failed; empty when it passed
    # metric -> {"candidate", "promoted", "floor", "allowed_drop" / "budget"}: the side-by-side view.
    comparison: dict[str, dict[str, float | None]]


def decide(
    candidate: Mapping[str, float] | None,
    promoted: Mapping[str, float] | None,
    settings: GateSettings,
) -> GateDecision:
    """``candidate`` and ``promoted`` are the default configuration's evaluation summaries;
    ``candidate`` is None when there are no gold queries, ``promoted`` when nothing serves yet."""
    if candidate is None:
        reasons = [] if settings.promote_without_gold else ["no gold queries to evaluate the candidate with"]
        return GateDecision(passed=not reasons, reasons=reasons, comparison={})
    reasons: list[str] = []
    comparison: dict[str, dict[str, float | None]] = {}
    for metric in QUALITY_METRICS:
        value, floor, drop = candidate[metric], settings.floors()[metric], settings.drops()[metric]
        before = promoted.get(metric) if promoted else None
        comparison[metric] = {"candidate": value, "promoted": before, "floor": floor, "allowed_drop": drop}
        if value < floor:
            reasons.append(f"{metric} {value:.4f} is below the floor {floor:.4f}")
        if before is not None and value < before - drop:
            reasons.append(f"{metric} {value:.4f} fell more than {drop:.4f} below the promoted {before:.4f}")
    p95 = candidate[LATENCY_METRIC]
    comparison[LATENCY_METRIC] = {
        "candidate": p95,
        "promoted": promoted.get(LATENCY_METRIC) if promoted else None,
        "budget": settings.p95_budget_ms,
    }
    if p95 > settings.p95_budget_ms:
        reasons.append(f"P95 {p95:.1f} ms is over the {settings.p95_budget_ms:.0f} ms budget")
    return GateDecision(passed=not reasons, reasons=reasons, comparison=comparison)
