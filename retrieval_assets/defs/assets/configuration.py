"""The candidate's retrieval configuration, learned from the gold queries (``core/evaluation/tuning.py``).

It is written beside the candidate version; ``retrieval_evaluation`` evaluates the candidate with
it, and the query resource serves with it only once the promotion gate passed with it.
"""

from typing import Any

import pandas as pd
from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset
from pydantic import Field

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.evaluation.tuning import ConfigurationLearner, TuningResult, TuningSettings, gold_fingerprint
from retrieval_assets.core.index.versions import CandidateRecord, IndexVersion, IndexVersions
from retrieval_assets.defs.assets.evaluation import GROUP, evaluated_version
from retrieval_assets.defs.assets.gold import catalog_gold, scope_of
from retrieval_assets.defs.metadata import preview, stopwatch
from retrieval_assets.defs.resources import CatalogResource, IndexStorageResource, SearchResource


class TuningConfig(Config, TuningSettings):
    """``TuningSettings``, plus whether a run may take the promoted version's configuration."""

    # The document update job does: a few changed documents do not call for a new search.
    reuse_promoted: bool = Field(
        default=False,
        description="Take the promoted version's learned configuration when it was learned from the same gold "
        "queries with the same settings.",
    )


def _settings_key(search: SearchResource, tuning: TuningSettings) -> str:
    """What a learned configuration depends on besides the index: the deployment's retrieval
    settings (the starting point and what is not tuned) and the search space."""
    return content_hash(search.retrieval_settings().model_dump_json(), tuning.model_dump_json())[:16]


def _reusable(
    versions: IndexVersions, candidate: IndexVersion, gold: str, settings_key: str, scope: list[str]
) -> dict[str, Any] | None:
    promoted = versions.promoted()
    if promoted is None or promoted.id == candidate.id:
        return None
    report = promoted.learned_configuration()
    if (
        report
        and report.get("gold") == gold
        and report.get("settings_key") == settings_key
        and report.get("gold_scope") == scope
    ):
        return {**report, "reason": f"reused from {promoted.id}: {report['reason']}", "reused_from": promoted.id}
    return None


def _fold_table(result: TuningResult) -> MetadataValue:
    rows = [
        {
            "fold": fold.fold + 1,
            "train_queries": fold.train_queries,
            "test_queries": fold.test_queries,
            "train_ndcg@10": fold.train_ndcg_at_10,
            "held_out_ndcg@10": fold.test_ndcg_at_10,
            "deployment_ndcg@10": fold.test_default_ndcg_at_10,
            "configuration": _describe(fold.configuration.model_dump(mode="json")),
        }
        for fold in result.folds
    ]
    return preview(pd.DataFrame(rows), rows=len(rows))


def _describe(configuration: dict[str, Any]) -> str:
    weights = ", ".join(f"{name} {weight:g}" for name, weight in configuration["weights"].items() if weight > 0)
    blend = configuration.get("rerank_blend")
    return (
        f"{configuration['fusion']} ({weights}), {configuration['candidates_per_strategy']} candidates"
        f"{', multi-query' if configuration['multi_query'] else ''}"
        f"{f', rerank blend {blend:g}' if blend is not None else ''}"
    )


@asset(
    group_name=GROUP,
    kinds={"python"},
)
def retrieval_configuration(
    context: AssetExecutionContext,
    config: TuningConfig,
    catalog: CatalogResource,
    storage: IndexStorageResource,
    search: SearchResource,
    index_version: CandidateRecord,
) -> MaterializeResult:
    """The fusion method, per-strategy weights, candidate depth, multi-query and rerank blend
    learned for the candidate from the gold queries by k-fold cross-validation, with each fold's
    held-out score; the deployment's configuration when there are too few gold queries or
    learning does not help on held-out queries."""
    versions = storage.versions()
    candidate = evaluated_version(context, versions, index_version)
    tuning = TuningSettings.model_validate(config.model_dump(exclude={"reuse_promoted"}))
    # Learned from gold people judged (BEIR qrels or curated) only: generated known-item gold favours
    # BM25 (docs/gold.md), and a configuration learned from it would learn that bias.
    judged = catalog_gold(catalog, storage)
    gold = judged.gold if judged.kind == "curated" else None
    with stopwatch() as timer:
        if gold is None:
            report: dict[str, Any] = {
                "adopted": False,
                "reason": "the catalog has no gold people judged (gold_path, curated_gold_path or `retrieval-assets "
                "gold add`): generated gold judges versions, but no configuration is learned from it",
            }
        else:
            # Learned among the gold's own tenants' documents, as the evaluation judges it.
            scope = scope_of(catalog, candidate, gold)
            settings_key = _settings_key(search, tuning)
            reused = (
                _reusable(versions, candidate, gold_fingerprint(gold), settings_key, list(scope.tenants))
                if config.reuse_promoted
                else None
            )
            if reused is not None:
                report = reused
            else:
                try:
                    learner = ConfigurationLearner(
                        search.retriever(candidate.id), gold, tuning, progress=context.log.info, tenants=scope.tenants
                    )
                    report = {
                        **learner.run().model_dump(mode="json"),
                        "settings_key": settings_key,
                        "gold_scope": list(scope.tenants),
                    }
                finally:
                    search.close()  # the evaluation step opens the candidate's qdrant-edge shard next
    report["version"] = candidate.id
    path = candidate.write_learned_configuration(report)
    context.log.info(f"retrieval configuration of {candidate.id}: {report['reason']}")
    metadata: dict[str, Any] = {
        "version": candidate.id,
        "adopted": bool(report["adopted"]),
        "reason": report["reason"],
        "report_path": str(path),
        "seconds": timer["seconds"],
    }
    if "configuration" in report:
        result = TuningResult.model_validate(report)
        chosen = report["configuration"]
        metadata |= {
            "configuration": _describe(chosen),
            "chosen": MetadataValue.json(chosen),
            **{f"weight/{name}": MetadataValue.float(float(w)) for name, w in chosen["weights"].items()},
            "candidates_per_strategy": chosen["candidates_per_strategy"],
            "multi_query": chosen["multi_query"],
            "queries": result.queries,
            "tuning_seconds": result.seconds,
            "stopped_early": result.stopped_early,
        }
        if result.folds:
            cross_validated = result.cross_validated()
            metadata |= {
                "folds": _fold_table(result),
                "tuned_cv/ndcg@10": MetadataValue.float(cross_validated["ndcg@10"]),
                "tuned_cv/recall@100": MetadataValue.float(cross_validated["recall@100"]),
                "deployment_cv/ndcg@10": MetadataValue.float(round(result.deployment_ndcg(), 4)),
                "fold_ndcg@10_std": MetadataValue.float(cross_validated["fold_ndcg@10_std"]),
            }
    return MaterializeResult(metadata=metadata)
