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
    Config,
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
from retrieval_assets.core.evaluation.gate import LATENCY_METRIC, QUALITY_METRICS, GateDecision, decide
from retrieval_assets.core.index.servers import switch_serving
from retrieval_assets.core.index.versions import CandidateRecord, IndexVersion, IndexVersions, VersionError
from retrieval_assets.defs.assets.index import INDEX_WRITES_POOL
from retrieval_assets.defs.metadata import OWNERS, code_referenced, log_progress, preview, stopwatch
from retrieval_assets.defs.resources import (
    CatalogResource,
    IndexStorageResource,
    PromotionGateResource,
    SearchResource,
)

GROUP = "evaluation"
# The run tag naming the version an evaluation run judges (set by the candidate sensor); without
# it, the last sealed candidate the IO manager holds.
EVALUATED_VERSION_TAG = "index_version"


def evaluated_version(context: AssetExecutionContext, versions: IndexVersions, record: CandidateRecord) -> IndexVersion:
    return versions.version(context.run.tags.get(EVALUATED_VERSION_TAG) or record.version)


def _table(frame: pd.DataFrame) -> MetadataValue:
    """The whole frame as a table in the UI; missing values (None, NaN) render blank."""
    return preview(frame, rows=len(frame))


_GATE_COLUMNS = ["metric", "candidate", "promoted", "floor", "allowed_drop", "budget"]


def _gate_table(decision: GateDecision) -> MetadataValue:
    """Candidate vs promoted, per gated metric; a blank cell is a value that does not apply or does not exist."""
    rows = [{"metric": metric, **values} for metric, values in decision.comparison.items()]
    return _table(pd.DataFrame(rows, columns=_GATE_COLUMNS))


def _gate_numbers(decision: GateDecision) -> dict[str, float]:
    """The candidate's gated metrics and their differences from the promoted version, as floats that plot."""
    numbers: dict[str, float] = {}
    for metric in (*QUALITY_METRICS, LATENCY_METRIC):
        values = decision.comparison.get(metric, {})
        candidate, promoted = values.get("candidate"), values.get("promoted")
        if candidate is not None:
            numbers[f"candidate/{metric}"] = float(candidate)
            if promoted is not None:
                numbers[f"vs_promoted/{metric}"] = round(float(candidate) - float(promoted), 6)
    return numbers


def _history_table(versions: IndexVersions) -> MetadataValue:
    return _table(pd.DataFrame(versions.quality_history()))


class EvaluationConfig(Config):
    # Configurations measured besides the default one (which the gate judges); all by default.
    configurations: list[str] = list(CONFIGURATIONS)


def _compared_with(promoted: IndexVersion | None, candidate: IndexVersion, previous: object) -> str:
    if promoted is None:
        return "(nothing promoted yet)"
    if promoted.id == candidate.id:
        return f"(none: {candidate.id} is the promoted version itself)"
    return promoted.id if previous else f"(promoted {promoted.id} has no evaluation)"


@asset(
    group_name=GROUP,
    kinds={"python"},
    owners=OWNERS,
    code_version="1",
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
    config: EvaluationConfig,
    catalog: CatalogResource,
    storage: IndexStorageResource,
    search: SearchResource,
    gate: PromotionGateResource,
    index_version: CandidateRecord,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """recall@k, nDCG@10, MRR@10 and per-query latency of the candidate for every configuration,
    and the promotion gate's verdict against the promoted version."""
    versions = storage.versions()
    candidate = evaluated_version(context, versions, index_version)
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
            unknown = set(config.configurations) - set(CONFIGURATIONS)
            if unknown:
                raise ValueError(f"unknown configurations {sorted(unknown)}; known: {sorted(CONFIGURATIONS)}")
            names = [DEFAULT_CONFIGURATION, *(n for n in config.configurations if n != DEFAULT_CONFIGURATION)]
            try:
                reports = evaluate_configurations(
                    search.retriever(candidate.id),
                    gold,
                    {name: CONFIGURATIONS[name] for name in names},
                    progress=lambda label: log_progress(context, label, every_percent=25),
                )
            finally:
                # Released before promotion: a serving process opens the promoted qdrant-edge
                # shard as soon as the pointer moves, and only one process may hold it.
                search.close()
            summary = {name: summarize(report) for name, report in reports.items()}
            default = reports[DEFAULT_CONFIGURATION]
            histogram = pd.DataFrame(ndcg_histogram(default), columns=["ndcg@10", "queries"])
            metadata |= {
                "queries": default.queries,
                "configuration": DEFAULT_CONFIGURATION,
                "options": MetadataValue.json(CONFIGURATIONS[DEFAULT_CONFIGURATION]),
                **{metric: MetadataValue.float(value) for metric, value in summary[DEFAULT_CONFIGURATION].items()},
                "configurations": _table(pd.DataFrame(summary).T.rename_axis("configuration").reset_index()),
                "ndcg@10_distribution": _table(histogram),
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
            "compared_with": _compared_with(promoted, candidate, previous),
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
                    "failed_gates": len(decision.reasons),
                    **_gate_numbers(decision),
                },
            )
        ],
    )


# No freshness policy: promoted_index materializes only when a candidate passes the gate, so a
# quiet night (nothing changed, or a candidate refused) would show it stale although nothing is
# wrong. Nightly freshness is watched on index_version, which every nightly build materializes.
@asset(
    group_name=GROUP,
    deps=[retrieval_evaluation],
    kinds={"python"},
    owners=OWNERS,
    code_version="1",
    pool=INDEX_WRITES_POOL,
)
def promoted_index(
    context: AssetExecutionContext, storage: IndexStorageResource, index_version: CandidateRecord
) -> MaterializeResult:
    """The version that serves queries: the candidate, switched in atomically once it passed the gate."""
    versions = storage.versions()
    candidate = evaluated_version(context, versions, index_version)
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


# Each asset links to its source in the UI; the names are rebound so each is loaded once.
retrieval_evaluation, promoted_index = code_referenced(retrieval_evaluation, promoted_index)
