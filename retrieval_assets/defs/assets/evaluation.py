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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    Config,
    DagsterInstance,
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
from retrieval_assets.core.evaluation.gate import (
    LATENCY_METRIC,
    QUALITY_METRICS,
    GateDecision,
    GateSettings,
    decide,
)
from retrieval_assets.core.evaluation.gold.model import GeneratedGold
from retrieval_assets.core.evaluation.metrics import EvaluationReport
from retrieval_assets.core.evaluation.scope import GoldScope, Post, posted_by, posted_since
from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration, TuningResult, gold_fingerprint
from retrieval_assets.core.index.servers import switch_serving
from retrieval_assets.core.index.versions import CandidateRecord, IndexVersion, IndexVersions, VersionError
from retrieval_assets.core.ingest.catalog import GoldSet
from retrieval_assets.core.ingest.inbox import InboxOutcome
from retrieval_assets.defs.assets.candidate import INDEX_WRITES_POOL
from retrieval_assets.defs.assets.gold import CatalogGold, catalog_gold, describe, retired_from, scope_of
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


def newer_candidate(instance: DagsterInstance, version_id: str) -> str | None:
    """The candidate of the newest build that sealed one, when it is not ``version_id``.

    Evaluations queue behind each other's index writes, so an older build's evaluation can run
    after a newer candidate was promoted; promoting it then would undo the newer build. A build
    that reuses an older version (an edit undone) materializes that version anew, so it is the
    newest again."""
    records = instance.fetch_materializations(AssetKey("index_version"), limit=50, ascending=False).records
    for record in records:
        materialization = record.asset_materialization
        metadata = materialization.metadata if materialization else {}
        sealed = metadata.get("sealed")
        if "version" in metadata and (sealed is None or sealed.value):
            newest = str(metadata["version"].value)
            return None if newest == version_id else newest
    return None


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


def _options_of(served: str) -> dict[str, Any]:
    """The options of a served configuration: a named one's, or none for the learned one (applied
    to the deployment itself)."""
    return {} if served == TUNED else CONFIGURATIONS[served]


def _retired_subset(
    judged: CatalogGold, previous_report: dict[str, Any], gold: GoldSet
) -> dict[str, dict[str, float]] | None:
    """The promoted version's per-query scores on the queries ``gold`` still has, when ``gold`` is
    the generated gold it was judged on less the queries of deleted documents; else None."""
    if judged.kind == "curated" or judged.generated is None:
        return None
    ancestors, pruned = retired_from(judged.generated)
    if previous_report.get("gold") not in ancestors:
        return None
    return {
        qid: scores
        for qid, scores in (previous_report.get("per_query") or {}).items()
        if qid in gold.queries and qid not in pruned
    }


def _promoted_on(
    context: AssetExecutionContext,
    search: SearchResource,
    promoted: IndexVersion,
    served: str,
    gold: GoldSet,
    scope: GoldScope,
    progress: Any,
) -> tuple[dict[str, float], dict[str, dict[str, float]]] | None:
    """The promoted version's summary and per-query scores on ``gold``, with the configuration it
    serves; None, logged, when it cannot be searched with this deployment (other models)."""
    try:
        deployment = search.retriever(promoted.id).configured(search.retrieval_settings())
        learned = promoted.served_configuration()
        if served == TUNED and learned:
            tuned = RetrievalConfiguration.model_validate(learned).apply(deployment.settings)
            deployment = deployment.configured(tuned)
        report = evaluate_configurations(
            deployment, gold, {served: _options_of(served)}, progress=progress, tenants=scope.tenants
        )
    except Exception as exc:  # any failure leaves the candidate judged without the promoted version
        context.log.warning(
            f"the promoted version {promoted.id} could not be measured on this gold ({type(exc).__name__}: {exc}): "
            "the gate judges the candidate on the floors and the best promoted ever only"
        )
        return None
    return summarize(report[served]), _per_query(report[served])


@dataclass(frozen=True)
class _Beside:
    """Generated gold judged beside curated gold: the candidate's figures on it and the gate's verdict."""

    gold: GeneratedGold
    summary: dict[str, float]
    per_query: dict[str, dict[str, float]]
    decision: GateDecision
    promoted_remeasured: bool

    def report(self, served: str) -> dict[str, Any]:
        return {
            "fingerprint": self.gold.fingerprint[:16],
            "kind": self.gold.kind,
            "queries": len(self.gold.queries),
            "runs": {served: self.summary},
            "per_query": self.per_query,
            "gate": self.decision.model_dump(mode="json"),
            "promoted_remeasured": self.promoted_remeasured,
        }


def _judge_beside(
    context: AssetExecutionContext,
    search: SearchResource,
    catalog: CatalogResource,
    deployment: Any,
    served: str,
    candidate: IndexVersion,
    promoted: tuple[IndexVersion, str, dict[str, Any]] | None,
    generated: GeneratedGold,
    settings: GateSettings,
    progress: Any,
) -> _Beside:
    """The served configuration on the catalog's generated gold, judged by the gate against the
    promoted version (``promoted``: it, the configuration it serves and its evaluation report) on the
    same queries: its recorded per-query scores when it was judged on this generated gold, else
    measured now. Only quality reasons count here; latency is the curated gold's gate."""
    gold = generated.as_gold_set()
    scope = scope_of(catalog, candidate, gold, generated)
    measured = evaluate_configurations(
        deployment, gold, {served: _options_of(served)}, progress=progress, tenants=scope.tenants
    )
    summary, per_query = summarize(measured[served]), _per_query(measured[served])
    before: tuple[dict[str, float], dict[str, dict[str, float]]] | None = None
    remeasured = False
    if promoted is not None:
        version, promoted_served, report = promoted
        recorded = report.get("generated_gold") or {}
        if recorded.get("fingerprint") == generated.fingerprint[:16] and recorded.get("per_query"):
            before = recorded["runs"][promoted_served], recorded["per_query"]
        else:
            before = _promoted_on(context, search, version, promoted_served, gold, scope, progress)
            remeasured = before is not None
    label = f"generated gold of {scope.label}"
    decision = decide(
        summary,
        before[0] if before else None,
        settings,
        candidate_queries=per_query,
        promoted_queries=before[1] if before else None,
        gold=label,
    )
    quality = [reason for reason in decision.reasons if reason.startswith(f"{label}:")]
    comparison = {metric: values for metric, values in decision.comparison.items() if metric != LATENCY_METRIC}
    decision = decision.model_copy(update={"passed": not quality, "reasons": quality, "comparison": comparison})
    return _Beside(generated, summary, per_query, decision, remeasured)


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
    return promoted.id if previous else f"(promoted {promoted.id} has no figures on this gold)"


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
    beside: _Beside | None = None
    per_query: dict[str, dict[str, float]] = {}
    # Every configuration's nDCG@10 per query: what `bench --generated-gold` needs to say how far
    # two halves of this gold agree with each other.
    ndcg_per_query: dict[str, dict[str, float]] = {}
    metadata: dict[str, Any] = {
        "version": candidate.id,
        "evaluated": gold is not None,
        "served": served,
        "gold_kind": judged.kind or "none",
        "gold_source": judged.source,
        "gold_scope": scope.label if scope is not None else "(no gold)",
    }
    fingerprint = gold_fingerprint(gold) if gold is not None else None
    promoted_queries: dict[str, dict[str, float]] | None = None
    remeasured: tuple[dict[str, float], dict[str, dict[str, float]]] | None = None
    if previous_report is not None and previous_report.get("gold") == fingerprint:
        promoted_queries = previous_report.get("per_query")
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
                    # Curated gold is often a few queries: the generated gold beside it gates too.
                    context.log.info(f"judging {served!r} on generated {describe(judged.beside)} too")
                    beside = _judge_beside(
                        context,
                        search,
                        catalog,
                        deployment.configured(tuned) if served == TUNED else deployment,
                        served,
                        candidate,
                        (promoted, previous_served, previous_report)
                        if promoted is not None and previous_report is not None and previous_served is not None
                        else None,
                        judged.beside,
                        gate.settings(),
                        progress,
                    )
                if (
                    promoted is not None
                    and previous_report is not None
                    and previous_served is not None
                    and previous is not None
                    and previous_report.get("gold") != fingerprint
                ):
                    promoted_queries = _retired_subset(judged, previous_report, gold)
                    if promoted_queries is not None:
                        context.log.info(
                            f"the gold lost the queries of deleted documents since {promoted.id} was judged: the "
                            f"paired test compares the {len(promoted_queries)} queries both were judged on"
                        )
                    else:
                        # Judged on other gold (curated gold grew, or a redraw): the promoted version is
                        # measured again on this gold, so that the gate compares like with like.
                        context.log.info(
                            f"the promoted version {promoted.id} was judged on other gold "
                            f"({previous_report.get('gold')}): measuring it on this gold ({fingerprint}) too"
                        )
                        remeasured = _promoted_on(context, search, promoted, previous_served, gold, scope, progress)
                        previous, promoted_queries = remeasured if remeasured else (None, None)
            finally:
                # Released before promotion: a serving process opens the promoted qdrant-edge
                # shard as soon as the pointer moves, and only one process may hold it.
                search.close()
            summary = {name: summarize(report) for name, report in reports.items()}
            if learned.get("folds"):
                summary[TUNED_CV] = TuningResult.model_validate(learned).cross_validated()
            gated = reports[served]
            per_query = _per_query(gated)
            ndcg_per_query = {name: {q.query_id: q.ndcg_at_10 for q in r.per_query} for name, r in reports.items()}
            histogram = pd.DataFrame(ndcg_histogram(gated), columns=["ndcg@10", "queries"])
            metadata |= {
                "queries": gated.queries,
                "configuration": served,
                "options": MetadataValue.json(learned["configuration"] if served == TUNED else CONFIGURATIONS[served]),
                **{metric: MetadataValue.float(value) for metric, value in summary[served].items()},
                "configurations": _table(pd.DataFrame(summary).T.rename_axis("configuration").reset_index()),
                "ndcg@10_distribution": _table(histogram),
                **{
                    f"generated_gold/{metric}": MetadataValue.float(value)
                    for metric, value in (beside.summary if beside else {}).items()
                },
            }
    best_ever = versions.best_promoted(fingerprint) if fingerprint else {}
    decision = decide(
        summary.get(served),
        previous,
        gate.settings(),
        candidate_queries=per_query,
        promoted_queries=promoted_queries or None,
        best_ever={metric: best_ever[metric] for metric in QUALITY_METRICS if metric in best_ever},
        gold=f"gold of {scope.label}" if scope is not None else None,
    )
    if beside is not None and not beside.decision.passed:
        reasons = [*decision.reasons, *beside.decision.reasons]
        decision = decision.model_copy(update={"passed": False, "reasons": reasons})
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
            "generated_gold": beside.report(served) if beside is not None else None,
            "runs": summary,
            "per_query": per_query,
            "ndcg_per_query": ndcg_per_query,
            "compared_with": compared,
            # The promoted version's figures were measured again on this gold (it was judged on other gold).
            "promoted_remeasured": remeasured is not None,
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
            "promoted_remeasured": remeasured is not None,
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
                    **(
                        {
                            "generated_gold": f"{beside.gold.kind} gold {beside.gold.fingerprint[:16]} (beside the "
                            "curated gold)",
                            "generated_gold_vs_promoted": _gate_table(beside.decision),
                        }
                        if beside is not None
                        else {}
                    ),
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
    newer = newer_candidate(context.instance, candidate.id)
    if newer is not None:
        raise VersionError(
            f"candidate {candidate.id} was superseded by {newer}, sealed by a later build: nothing was promoted "
            "(the later candidate is evaluated on its own; rollback_job serves an older version on purpose)"
        )
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
