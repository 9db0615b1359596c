"""Evaluation of the candidate version against the gold queries, and its gated promotion.

``retrieval_evaluation`` measures the candidate through the same query resource that serves
queries, with the configuration it would serve (the learned one when ``retrieval_configuration``
adopted it), and records the gate's verdict next to the version. Its ``promotion_gate`` check is
blocking: when it fails, ``promoted_index`` does not run and serving stays on the promoted version.

The gold queries are searched among their catalog's tenants' documents only (``gold_scope``), so
documents other tenants post cannot move the figures; a refusal names the gold's tenant and how many
documents that tenant posted since the promoted version (``gate_refusal``, ``posted_since_promoted``).
"""


from collections import Counter
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
from pydantic import Field

from retrieval_assets.core.evaluation.benchmark import (
    CONFIGURATIONS,
    DEFAULT_CONFIGURATION,
    evaluate_configurations,
    ndcg_histogram,
    summarize,
)
from retrieval_assets.core.evaluation.gate import LATENCY_METRIC, QUALITY_METRICS, GateDecision, decide
from retrieval_assets.core.evaluation.metrics import EvaluationReport
from retrieval_assets.core.evaluation.scope import GoldScope, Post, posted_by, posted_since
from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration, TuningResult, gold_fingerprint
from retrieval_assets.core.index.servers import switch_serving
from retrieval_assets.core.index.versions import CandidateRecord, IndexVersion, IndexVersions, VersionError
from retrieval_assets.core.ingest.inbox import InboxOutcome
from retrieval_assets.defs.assets.candidate import INDEX_WRITES_POOL
from retrieval_assets.defs.assets.gold import catalog_gold, describe, retired_from, scope_of
from retrieval_assets.defs.metadata import log_progress, preview, quality_history_table, stopwatch
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


def _table(frame: pd.DataFrame, descriptions: dict[str, str] | None = None) -> MetadataValue:
    """The whole frame as a table in the UI; missing values (None, NaN) render blank."""
    return preview(frame, rows=len(frame), descriptions=descriptions)


_GATE_COLUMNS = [
    "metric", "candidate", "promoted", "best_ever", "floor", "allowed_drop", "ci_low", "ci_high", "p_value", "budget"
]


def _gate_table(decision: GateDecision) -> MetadataValue:
    """Candidate vs promoted, per gated metric; a blank cell is a value that does not apply or does not exist."""
    rows = [{"metric": metric, **values} for metric, values in decision.comparison.items()]
    return _table(pd.DataFrame(rows, columns=_GATE_COLUMNS))


def _gate_numbers(decision: GateDecision) -> dict[str, float]:
    """The candidate's gated metrics, their differences from the promoted version and, per query,
    the paired test's interval and p-value, as floats that plot over time."""
    numbers: dict[str, float] = {}
    for metric in (*QUALITY_METRICS, LATENCY_METRIC):
        values = decision.comparison.get(metric, {})
        candidate, promoted = values.get("candidate"), values.get("promoted")
        if candidate is not None:
            numbers[f"candidate/{metric}"] = float(candidate)
            if promoted is not None:
                numbers[f"vs_promoted/{metric}"] = round(float(candidate) - float(promoted), 6)
    for metric, difference in decision.paired.items():
        numbers |= {
            f"ci_low/{metric}": round(difference.ci_low, 6),
            f"ci_high/{metric}": round(difference.ci_high, 6),
            f"p_value/{metric}": round(difference.p_value, 6),
            f"queries_better/{metric}": difference.wins,
            f"queries_worse/{metric}": difference.losses,
        }
    return numbers


# The name the learned configuration is evaluated and reported under, and its held-out estimate's.
TUNED, TUNED_CV = "tuned", "tuned_cv"


def _per_query(report: EvaluationReport) -> dict[str, dict[str, float]]:
    return {q.query_id: {"ndcg@10": q.ndcg_at_10, "recall@100": q.recall_at_100} for q in report.per_query}


_POSTED_COLUMNS = {
    "tenant_id": "The tenant that posted the documents.",
    "sender": "The API key that sent them (blank: no keys configured).",
    "operation": "upsert or delete.",
    "documents": "Inbox entries of this tenant, sender and operation in the candidate but not in the promoted version.",
    "in_gold_scope": "Whether the tenant is one the gold is judged among: only such posts can move the gate's figures.",
}


def _posted_since_promoted(
    catalog: CatalogResource, candidate: IndexVersion, promoted: IndexVersion | None
) -> Counter[tuple[str, str | None, str]]:
    """The inbox entries the candidate took in that the promoted version does not hold, by
    (tenant, sender, operation); rejected posts changed nothing and are left out."""
    inbox = catalog.inbox()
    if inbox is None:
        return Counter()
    posts = [
        Post(entry.tenant_id, entry.sender, entry.operation.value, entry.version, entry.taken_at)
        for entry in inbox.archived()
        if entry.outcome is not InboxOutcome.REJECTED
    ]
    promoted_sealed = promoted.manifest()["sealed_at"] if promoted is not None and promoted.sealed else None
    return posted_since(
        posts,
        promoted=promoted.id if promoted is not None else None,
        promoted_sealed_at=promoted_sealed,
        candidate=candidate.id,
        candidate_sealed_at=candidate.manifest()["sealed_at"],
    )


def _explain(
    decision: GateDecision, scope: GoldScope, posted: Counter[tuple[str, str | None, str]], promoted: str | None
) -> str:
    """Why the gate refused, for the tenant whose gold fell: its figures before and after, and
    how many documents it posted itself since the promoted version."""
    moved = [
        f"{name} {values['promoted']:.4f} → {values['candidate']:.4f}"
        for metric, name in (("ndcg@10", "nDCG@10"), ("recall@100", "recall@100"))
        if (values := decision.comparison.get(metric)) and values.get("promoted") is not None
        and values.get("candidate") is not None
    ]
    quality_failed = any(reason.startswith(f"gold of {scope.label}:") for reason in decision.reasons)
    if not quality_failed:
        return "; ".join(decision.reasons)
    line = f"gold of {scope.label}: " + (", ".join(moved) or "; ".join(decision.reasons))
    own = posted_by(posted, scope.tenants)
    since = f"since the promoted version {promoted}" if promoted else "in this candidate"
    if own:
        senders = sorted({sender or "(no key)" for (tenant, sender, _), n in posted.items() if tenant in scope.tenants})
        line += f"; documents posted by {scope.label} {since}: {own} (sent by {', '.join(senders)})"
    else:
        line += f"; no documents posted by {scope.label} {since}"
    others = sum(posted.values()) - own
    if others:
        line += f" (other tenants posted {others}, outside this gold's scope)"
    return line


class EvaluationConfig(Config):
    """Which named configurations ``retrieval_evaluation`` measures."""

    configurations: list[str] = Field(
        default=list(CONFIGURATIONS),
        description="Configurations measured besides the default one (which the gate judges); all by default.",
    )


def _compared_with(promoted: IndexVersion | None, candidate: IndexVersion, previous: object) -> str:
    if promoted is None:
        return "(nothing promoted yet)"
    if promoted.id == candidate.id:
        return f"(none: {candidate.id} is the promoted version itself)"
    return promoted.id if previous else f"(promoted {promoted.id} has no evaluation)"


@asset(
    group_name=GROUP,
    kinds={"python"},
    # Reads the configuration learned for the candidate from the version directory.
    deps=["retrieval_configuration", "gold_queries"],
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
    previous_served = (previous_report or {}).get("served") or (previous_report or {}).get("default")
    previous = (previous_report or {}).get("runs", {}).get(previous_served)
    learned = candidate.learned_configuration() or {}
    served = TUNED if learned.get("adopted") else DEFAULT_CONFIGURATION

    judged = catalog_gold(catalog, storage)
    gold = judged.gold
    # Each gold set is judged among its own catalog's tenants only: documents that other tenants
    # post cannot enter its result lists, nor move the gate's figures.
    scope = (
        scope_of(catalog, candidate, gold, judged.generated if judged.kind != "curated" else None)
        if gold is not None
        else None
    )
    summary: dict[str, dict[str, float]] = {}
    beside: dict[str, float] = {}
    per_query: dict[str, dict[str, float]] = {}
    metadata: dict[str, Any] = {
        "version": candidate.id,
        "evaluated": gold is not None,
        "served": served,
        "gold_kind": judged.kind or "none",
        "gold_source": judged.source,
        "gold_scope": scope.label if scope is not None else "(no gold)",
    }
    with stopwatch() as timer:
        if gold is None:
            context.log.warning(
                "the catalog has no gold queries and no generated gold (materialize gold_queries): "
                "the gate decides on checks alone"
            )
        else:
            if judged.kind != "curated" and judged.generated is not None:
                context.log.info(f"the catalog has no gold of its own: generated {describe(judged.generated)} is used")
            assert scope is not None
            context.log.info(f"the gold queries search the documents of {scope.label} only")
            unknown = set(config.configurations) - set(CONFIGURATIONS)
            if unknown:
                raise ValueError(f"unknown configurations {sorted(unknown)}; known: {sorted(CONFIGURATIONS)}")
            names = [DEFAULT_CONFIGURATION, *(n for n in config.configurations if n != DEFAULT_CONFIGURATION)]

            def progress(label: str):
                return log_progress(context, label, every_percent=25)

            try:
                # The named configurations change the deployment's settings, not a learned configuration.
                deployment = search.retriever(candidate.id).configured(search.retrieval_settings())
                reports = evaluate_configurations(
                    deployment,
                    gold,
                    {name: CONFIGURATIONS[name] for name in names},
                    progress=progress,
                    tenants=scope.tenants,
                )
                if served == TUNED:
                    context.log.info(f"evaluating the learned configuration as {TUNED!r}: {learned['reason']}")
                    tuned = RetrievalConfiguration.model_validate(learned["configuration"]).apply(deployment.settings)
                    reports |= evaluate_configurations(
                        deployment.configured(tuned), gold, {TUNED: {}}, progress=progress, tenants=scope.tenants
                    )
                if judged.beside is not None:
                    # Generated gold beside curated gold: the served configuration, recorded, not gated.
                    context.log.info(f"measuring {served!r} on generated {describe(judged.beside)} too (not gated)")
                    served_deployment = deployment.configured(tuned) if served == TUNED else deployment
                    beside_gold = judged.beside.as_gold_set()
                    beside = summarize(
                        evaluate_configurations(
                            served_deployment,
                            beside_gold,
                            {served: {} if served == TUNED else CONFIGURATIONS[served]},
                            progress=progress,
                            tenants=scope_of(catalog, candidate, beside_gold, judged.beside).tenants,
                        )[served]
                    )
            finally:
                # Released before promotion: a serving process opens the promoted qdrant-edge
                # shard as soon as the pointer moves, and only one process may hold it.
                search.close()
            summary = {name: summarize(report) for name, report in reports.items()}
            if learned.get("folds"):
                summary[TUNED_CV] = TuningResult.model_validate(learned).cross_validated()
            gated = reports[served]
            per_query = _per_query(gated)
            histogram = pd.DataFrame(ndcg_histogram(gated), columns=["ndcg@10", "queries"])
            metadata |= {
                "queries": gated.queries,
                "configuration": served,
                "options": MetadataValue.json(learned["configuration"] if served == TUNED else CONFIGURATIONS[served]),
                **{metric: MetadataValue.float(value) for metric, value in summary[served].items()},
                "configurations": _table(pd.DataFrame(summary).T.rename_axis("configuration").reset_index()),
                "ndcg@10_distribution": _table(histogram),
                **{f"generated_gold/{metric}": MetadataValue.float(value) for metric, value in beside.items()},
            }
    fingerprint = gold_fingerprint(gold) if gold is not None else None
    best_ever = versions.best_promoted(fingerprint) if fingerprint else {}
    same_gold = previous_report is not None and previous_report.get("gold") == fingerprint
    promoted_queries = (previous_report or {}).get("per_query") if same_gold else None
    if previous_report and not same_gold and gold is not None and judged.kind != "curated" and judged.generated:
        # Generated gold that only lost queries of deleted documents since the promoted version's
        # evaluation: the paired test compares the two on the queries both were judged on.
        ancestors, pruned = retired_from(judged.generated)
        if previous_report.get("gold") in ancestors:
            promoted_queries = {
                qid: scores
                for qid, scores in (previous_report.get("per_query") or {}).items()
                if qid in gold.queries and qid not in pruned
            }
            context.log.info(
                f"the gold lost the queries of deleted documents since {promoted.id if promoted else 'the promoted'} "
                f"was judged: the paired test compares the {len(promoted_queries)} queries both were judged on"
            )
    decision = decide(
        summary.get(served),
        previous,
        gate.settings(),
        candidate_queries=per_query,
        promoted_queries=promoted_queries or None,
        best_ever={metric: best_ever[metric] for metric in QUALITY_METRICS if metric in best_ever},
        gold=f"gold of {scope.label}" if scope is not None else None,
    )
    before = promoted if promoted is not None and promoted.id != candidate.id else None
    posted = _posted_since_promoted(catalog, candidate, before)
    posted_rows = [
        {
            "tenant_id": tenant,
            "sender": sender,
            "operation": operation,
            "documents": n,
            "in_gold_scope": scope is not None and tenant in scope.tenants,
        }
        for (tenant, sender, operation), n in sorted(posted.items(), key=lambda item: str(item[0]))
    ]
    compared = promoted.id if previous and promoted is not None else None
    explanation = (
        _explain(decision, scope, posted, before.id if before else None)
        if not decision.passed and scope is not None
        else None
    )
    report_path = candidate.write_evaluation(
        {
            "version": candidate.id,
            "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "default": DEFAULT_CONFIGURATION,
            "served": served,
            "served_configuration": learned.get("configuration") if served == TUNED else None,
            "gold": fingerprint,
            "gold_kind": judged.kind,
            "gold_source": judged.source,
            "generated_gold": (
                {
                    "fingerprint": judged.beside.fingerprint[:16],
                    "kind": judged.beside.kind,
                    "queries": len(judged.beside.queries),
                    "runs": {served: beside},
                }
                if judged.beside is not None and beside
                else None
            ),
            "runs": summary,
            "per_query": per_query,
            "compared_with": compared,
            "gold_scope": list(scope.tenants) if scope is not None else None,
            "posted_since_promoted": posted_rows,
            "gate": decision.model_dump(mode="json"),
            "explanation": explanation,
        }
    )
    if not decision.passed:
        versions.log(
            "refused",
            version=candidate.id,
            reasons=decision.reasons,
            gold_scope=list(scope.tenants) if scope is not None else None,
            explanation=explanation,
        )
        context.log.error(f"candidate {candidate.id} refused: {explanation or '; '.join(decision.reasons)}")
    posted_metadata: dict[str, Any] = (
        {"posted_since_promoted": _table(pd.DataFrame(posted_rows, columns=list(_POSTED_COLUMNS)), _POSTED_COLUMNS)}
        if posted_rows
        else {}
    )
    return MaterializeResult(
        metadata={
            **metadata,
            "gate_passed": decision.passed,
            **({"gate_refusal": explanation} if explanation else {}),
            **posted_metadata,
            "compared_with": _compared_with(promoted, candidate, previous),
            "report_path": str(report_path),
            "seconds": timer["seconds"],
            **({"gold": fingerprint} if fingerprint else {}),
            "quality_history": quality_history_table(versions, deciding=candidate.id),
        },
        check_results=[
            AssetCheckResult(
                check_name="promotion_gate",
                passed=decision.passed,
                metadata={
                    "reasons": "; ".join(decision.reasons) or "all gates passed",
                    **({"why": explanation} if explanation else {}),
                    "gold_scope": scope.label if scope is not None else "(no gold)",
                    "gold": f"{judged.kind} gold {fingerprint}: {judged.source}" if fingerprint else "(none)",
                    "candidate_vs_promoted": _gate_table(decision),
                    "failed_gates": len(decision.reasons),
                    **_gate_numbers(decision),
                    **(
                        {"per_query_losses_and_wins": _table(pd.DataFrame(decision.changes))}
                        if decision.changes
                        else {}
                    ),
                },
            )
        ],
    )


@asset(
    group_name=GROUP,
    deps=[retrieval_evaluation],
    kinds={"python"},
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
        metrics = report["runs"].get(report.get("served") or report["default"])
        switch_serving(
            versions,
            servers,
            candidate,
            reason="passed the promotion gate",
            metrics=metrics,
            gold=report.get("gold"),
            gold_scope=report.get("gold_scope"),
        )
        context.log.info(f"promoted {candidate.id} (was {current.id if current else 'nothing'})")
    pruned = versions.prune(storage.keep_versions)
    if servers:
        for version_id in pruned:
            servers.drop(version_id)
    return MaterializeResult(
        metadata={
            "version": candidate.id,
            "previous": current.id if current else "(none)",
            "changed": current is None or current.id != candidate.id,
            "pruned_versions": ", ".join(pruned) or "(none)",
            "quality_history": quality_history_table(versions),
        }
    )
