"""Jobs: the incremental build, evaluation with gated promotion, the cache warm-up, rollback.

``index_build_job`` is the whole incremental build, unpartitioned, ending at the sealed
candidate; the candidate sensor then starts ``evaluation_job``, which promotes only through the
gate, judged on the catalog's gold queries (``gold_queries``). ``document_update_job`` (started by
the inbox sensor) does both in one run, so posted documents are searchable without waiting for a
second run to start. ``embedding_shards_job`` backfills the embedding cache per catalog source and
hash shard; ``gold_redraw_job`` replaces a catalog's frozen generated gold.
"""


from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetSelection,
    Config,
    OpExecutionContext,
    define_asset_job,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from retrieval_assets.core.index.servers import roll_back
from retrieval_assets.defs.metadata import quality_history_table
from retrieval_assets.defs.resources import IndexStorageResource

# Selected by key: an asset object imported into this module would be found twice by
# ``load_from_defs_folder``, once here and once in its own module.
EVALUATION = AssetSelection.assets("gold_queries", "retrieval_configuration", "retrieval_evaluation", "promoted_index")
BUILD = AssetSelection.all() - AssetSelection.assets("embedding_cache_shard") - EVALUATION
# Build, evaluation and promotion in one run: every asset but the partitioned cache warm-up.
WHOLE_BUILD = BUILD | EVALUATION

evaluation_job = define_asset_job(
    "evaluation_job",
    selection=EVALUATION,
    description="Learn the candidate's retrieval configuration, evaluate it through the query resource; promote "
    "it only if the gate passes.",
    # A refused candidate fails its run by design (the gate is a blocking check), and judging it again
    # gives the same verdict: the instance's run retry would only repeat the evaluation.
    tags={"dagster/max_retries": "0"},
)

index_build_job = define_asset_job(
    "index_build_job",
    selection=BUILD,
    description="The whole incremental build: ingest, clean, chunk, embed what changed, write and seal a candidate.",
)

# The gate judges the served configuration only (the nightly evaluation measures them all), and a
# few posted documents keep the promoted version's learned configuration instead of a new search.
DOCUMENT_UPDATE_CONFIG = {
    "ops": {
        "retrieval_evaluation": {"config": {"configurations": []}},
        "retrieval_configuration": {"config": {"reuse_promoted": True}},
    }
}

document_update_job = define_asset_job(
    "document_update_job",
    selection=WHOLE_BUILD,
    # One process: the models load once, not once per step, which is most of a small update's time.
    executor_def=in_process_executor,
    config=DOCUMENT_UPDATE_CONFIG,
    description="Take in the documents posted to the inbox: the incremental build (a delta from the promoted "
    "version when little changed), then evaluation and gated promotion, in one run.",
)

# The explicit action that replaces a catalog's frozen generated gold (retrieval-assets gold redraw).
GOLD_REDRAW_CONFIG = {"ops": {"gold_queries": {"config": {"redraw": True}}}}

gold_redraw_job = define_asset_job(
    "gold_redraw_job",
    selection=AssetSelection.assets("gold_queries"),
    config=GOLD_REDRAW_CONFIG,
    description="Draw the catalog's generated gold queries anew from the latest cleaned documents (the frozen set's "
    "file stays); later evaluations judge with the new set. A catalog with gold of its own keeps it.",
)

embedding_shards_job = define_asset_job(
    "embedding_shards_job",
    selection=AssetSelection.assets("embedding_cache_shard"),
    description="Fill the embedding cache for one catalog source and hash shard; backfill shards in parallel.",
)

class RollbackConfig(Config):
    """Which version ``rollback_job`` serves again."""

    to_version: str | None = Field(
        default=None, description="The version to serve; unset: the version promoted before the current one."
    )
    force: bool = Field(
        default=False,
        description="Serve the version even though the promotion gate refused it; recorded as a forced rollback.",
    )
    requested_by: str | None = Field(default=None, description="Who asks for the rollback, for the history.")
    reason: str | None = Field(default=None, description="Why, for the history (a forced rollback above all).")


@op(out={})
def rollback_promoted_version(context: OpExecutionContext, config: RollbackConfig, storage: IndexStorageResource):
    versions = storage.versions()
    before = versions.promoted()
    target = roll_back(
        versions,
        storage.servers(),
        config.to_version,
        force=config.force,
        by=config.requested_by,
        why=config.reason,
    )
    verdict, reasons = target.gate_verdict()
    forced = verdict == "refused"
    context.log.info(f"serving {target.id} again (was {before.id if before else 'nothing'})")
    if forced:
        context.log.warning(
            f"forced rollback: the promotion gate refused {target.id} ({'; '.join(reasons)}); "
            f"by {config.requested_by or '(unknown)'}: {config.reason or '(no reason given)'}"
        )
    yield AssetMaterialization(
        asset_key=AssetKey("promoted_index"),
        description="forced rollback past a refused gate" if forced else "rollback",
        metadata={
            "version": target.id,
            "previous": before.id if before else "(none)",
            "changed": True,
            "gate": verdict,
            "forced": forced,
            **(
                {
                    "gate_reasons": "; ".join(reasons) or "(none recorded)",
                    "forced_by": config.requested_by or "(unknown)",
                    "forced_why": config.reason or "(no reason given)",
                }
                if forced
                else {}
            ),
            "quality_history": quality_history_table(versions),
        },
    )


@job(description="Point serving back at the previously promoted version (or at config.to_version).")
def rollback_job():
    rollback_promoted_version()
