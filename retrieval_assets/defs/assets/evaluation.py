"""Evaluation of the candidate version against the gold queries, and its gated promotion.

``retrieval_evaluation`` measures the candidate through the same query resource that serves
queries, and records the gate's verdict next to the version. Its ``promotion_gate`` check is
blocking: when it fails, ``promoted_index`` does not run and serving stays on the promoted version.
"""


from datetime import UTC, datetime
from typing import Any

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.evaluation.benchmark import (
    CONFIGURATIONS,
    DEFAULT_CONFIGURATION,
    evaluate_configurations,
    ndcg_histogram,
    summarize,
)
from retrieval_assets.core.evaluation.gate import GateDecision, decide
from retrieval_assets.core.index.servers import switch_serving
from retrieval_assets.core.index.versions import IndexVersions, VersionError
from retrieval_assets.defs.assets.index import NIGHTLY_FRESHNESS
from retrieval_assets.defs.metadata import log_progress, stopwatch
from retrieval_assets.defs.resources import (
    CatalogResource,
    IndexStorageResource,
    PromotionGateResource,
    SearchResource,
)

GROUP = "evaluation"


def _markdown(frame: pd.DataFrame) -> MetadataValue:
    return MetadataValue.md(frame.to_markdown(index=False) if len(frame) else "_(empty)_")


def _gate_table(decision: GateDecision) -> MetadataValue:
    return _markdown(pd.DataFrame(decision.comparison).T.rename_axis("metric").reset_index())


def _history_table(versions: IndexVersions) -> MetadataValue:
    return _markdown(pd.DataFrame(versions.quality_history()))


@asset(
    group_name=GROUP,
    check_specs=[
        AssetCheckSpec(
            "promotion_gate",
            asset="retrieval_evaluation",
            blocking=True,
            description="Quality floors, allowed drops against the promoted version, and the P95 budget.",
        )
    ],
)
def retrieval_evaluation(
    context: AssetExecutionContext,
    catalog: CatalogResource,
    storage: IndexStorageResource,
    search: SearchResource,
    gate: PromotionGateResource,
    index_version: dict[str, Any],
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """recall@k, nDCG@10, MRR@10 and per-query latency of the candidate for every configuration,
    and the promotion gate's verdict against the promoted version."""
    versions = storage.versions()
    candidate = versions.version(index_version["version"])
    if not candidate.sealed:
        raise VersionError(f"candidate {candidate.id} is not sealed: its backends disagree; re-run the index build")
    promoted = versions.promoted()
    previous_report = promoted.evaluation() if promoted and promoted.id != candidate.id else None
    previous = (previous_report or {}).get("runs", {}).get(DEFAULT_CONFIGURATION)

    gold = catalog.gold()
    summary: dict[str, dict[str, float]] = {}
    metadata: dict[str, Any] = {"version": candidate.id, "evaluated": gold is not None}
    with stopwatch() as timer:
        if gold is None:
            context.log.warning("the catalog has no gold queries (set gold_path): the gate decides on checks alone")
        else:
            reports = evaluate_configurations(
                search.retriever(candidate.id),
                gold,
                progress=lambda label: log_progress(context, label, every_percent=25),
            )
            summary = {name: summarize(report) for name, report in reports.items()}
            default = reports[DEFAULT_CONFIGURATION]
            histogram = pd.DataFrame(ndcg_histogram(default), columns=["ndcg@10", "queries"])
            metadata |= {
                "queries": default.queries,
                "configuration": DEFAULT_CONFIGURATION,
                "options": MetadataValue.json(CONFIGURATIONS[DEFAULT_CONFIGURATION]),
                **{metric: MetadataValue.float(value) for metric, value in summary[DEFAULT_CONFIGURATION].items()},
                "configurations": _markdown(pd.DataFrame(summary).T.rename_axis("configuration").reset_index()),
                "ndcg@10_distribution": _markdown(histogram),
            }
    decision = decide(summary.get(DEFAULT_CONFIGURATION), previous, gate.settings())
    report_path = candidate.write_evaluation(
        {
            "version": candidate.id,
            "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "default": DEFAULT_CONFIGURATION,
            "runs": summary,
            "compared_with": promoted.id if previous else None,
            "gate": decision.model_dump(),
        }
    )
    if not decision.passed:
        versions.log("refused", version=candidate.id, reasons=decision.reasons)
        context.log.error(f"candidate {candidate.id} refused: {'; '.join(decision.reasons)}")
    return MaterializeResult(
        metadata={
            **metadata,
            "gate_passed": decision.passed,
            "compared_with": promoted.id if previous else "(nothing promoted yet)",
            "report_path": str(report_path),
            "seconds": timer["seconds"],
            "quality_history": _history_table(versions),
        },
        check_results=[
            AssetCheckResult(
                check_name="promotion_gate",
                passed=decision.passed,
                metadata={
                    "reasons": "; ".join(decision.reasons) or "all gates passed",
                    "candidate_vs_promoted": _gate_table(decision),
                },
            )
        ],
    )


@asset(group_name=GROUP, deps=[retrieval_evaluation], freshness_policy=NIGHTLY_FRESHNESS)
def promoted_index(
    context: AssetExecutionContext, storage: IndexStorageResource, index_version: dict[str, Any]
) -> MaterializeResult:
    """The version that serves queries: the candidate, switched in atomically once it passed the gate."""
    versions = storage.versions()
    candidate = versions.version(index_version["version"])
    report = candidate.evaluation() or {}
    if not report.get("gate", {}).get("passed"):
        raise VersionError(f"candidate {candidate.id} has not passed the promotion gate; nothing was promoted")
    current = versions.promoted()
    servers = storage.servers()
    if current is None or current.id != candidate.id:
        metrics = report["runs"].get(report["default"])
        switch_serving(versions, servers, candidate, reason="passed the promotion gate", metrics=metrics)
        context.log.info(f"promoted {candidate.id} (was {current.id if current else 'nothing'})")
    pruned = versions.prune(storage.keep_versions)
    for version_id in pruned if servers else ():
        servers.drop(version_id)
    return MaterializeResult(
        metadata={
            "version": candidate.id,
            "previous": current.id if current else "(none)",
            "changed": current is None or current.id != candidate.id,
            "pruned_versions": ", ".join(pruned) or "(none)",
            "quality_history": _history_table(versions),
        }
    )
