"""The candidate index version: named from the build fingerprint, then sealed.

``index_candidate`` names the version from the build fingerprint and decides how it is built.
When a complete version with that fingerprint exists (nothing changed), every index asset reuses
it. When it differs from the promoted version by a few chunks, each index asset starts from a
copy of the promoted version's index and applies only the changes (``core.index.delta``).
Otherwise every index is built in full. ``index_version`` seals the candidate once every backend
holds the same chunk ids; its materialization is what the evaluation sensor waits for.
"""

from dataclasses import replace

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.index.build import (
    backend_differences,
    candidate_fingerprints,
    checked_backend_chunk_ids,
    chunk_table,
    disagreeing_backends,
    record_candidate_chunks,
    seal_candidate,
    sealed_chunk_ids,
)
from retrieval_assets.core.index.delta import (
    Delta,
    decide_build,
    load_delta,
    record_decision,
)
from retrieval_assets.core.index.layout import IndexLayout
from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.core.io.tables import ROW_HASH
from retrieval_assets.defs.io_manager import StoredTable
from retrieval_assets.defs.resources import (
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
)

GROUP = "index"
# Every asset that writes into an index version takes a slot of this pool (dagster.yaml:
# `concurrency: pools: default_limit: 1`), so two builds never write one version at once.
INDEX_WRITES_POOL = "index_writes"


def candidate_layout(storage: IndexStorageResource, candidate: CandidateRecord) -> IndexLayout:
    """Where the candidate's indexes, vocabulary and graph are written."""
    return storage.versions().version(candidate.version).layout


def candidate_delta(storage: IndexStorageResource, candidate: CandidateRecord) -> Delta | None:
    """The base and plan of a candidate built as a delta; None when reused or built in full."""
    return load_delta(storage.versions(), candidate)


def build_metadata(candidate: CandidateRecord) -> dict[str, str | bool]:
    """How an index asset's version was built: reused, delta from a base, or full."""
    return {"mode": candidate.mode, "reused_version": candidate.reused}


def _chunk_table(chunks: StoredTable) -> pd.DataFrame:
    """The ``chunk_table`` of the stored chunks: from the row hashes the chunks asset keeps
    beside them, else (a table stored before it did) hashed from every row."""
    if ROW_HASH not in chunks.table.held_columns:
        return chunk_table(chunks.read())
    return chunk_table(chunks.read_columns(["chunk_id", "doc_id", ROW_HASH]))


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"python"},
    ins={"chunks": AssetIn(metadata={"deferred": True})},
)
def index_candidate(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    models: ModelResource,
    build: IndexBuildResource,
    chunks: StoredTable,
) -> MaterializeResult[CandidateRecord]:
    """The version this build writes, named by its fingerprint (chunks, models and index
    settings), and how: reused, as a delta from the promoted version, or in full."""
    table = _chunk_table(chunks)
    fingerprint, settings_fingerprint = candidate_fingerprints(
        table,
        models.dense_encoder(),
        models.sparse_encoder(),
        build.vocabulary,
        build.graph_domain_fields,
        build.context_tokens,
        build.lexical_stemmer,
        build.dense_index,
    )
    versions = storage.versions()
    version = versions.candidate(fingerprint)
    promoted = versions.promoted()
    plan = None
    if version.sealed:
        reason = "identical to a complete version"
    else:
        decision = decide_build(
            lambda documents: chunks.read_where("doc_id", documents),
            settings_fingerprint,
            promoted,
            build.delta_max_changed_fraction,
            build.context_tokens,
            table,
        )
        record_decision(version, decision)
        record_candidate_chunks(version, table)
        reason, plan = decision.reason, decision.plan
    record = CandidateRecord(
        version=version.id,
        fingerprint=fingerprint,
        reused=version.sealed,
        settings_fingerprint=settings_fingerprint,
        base_version=plan.base if plan else None,
        build_reason=reason,
    )
    context.log.info(f"candidate {version.id}: {record.mode} ({reason})")
    return MaterializeResult(
        value=record,
        metadata={
            "version": record.version,
            "fingerprint": record.fingerprint,
            "reused": record.reused,
            "mode": record.mode,
            "reason": reason,
            "upserted_chunks": len(plan.upserted) if plan else 0,
            "deleted_chunks": len(plan.deleted) if plan else 0,
            "changed_documents": len(plan.documents) if plan else 0,
            "path": str(version.path),
            "promoted_version": promoted.id if promoted else "(none)",
        },
    )


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    deps=["knowledge_graph", "vocabulary", "faiss_index", "qdrant_edge_index", "tantivy_index", "server_indexes"],
    ins={"chunks": AssetIn(metadata={"columns": ["chunk_id", "doc_id"]})},
    kinds={"python"},
    pool=INDEX_WRITES_POOL,
    check_specs=[
        AssetCheckSpec(
            "backends_hold_same_chunk_ids",
            asset="index_version",
            blocking=True,
            description="Every backend (embedded, and servers when configured) holds exactly the build's chunk ids.",
        )
    ],
)
def index_version(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    chunks: pd.DataFrame,
    index_candidate: CandidateRecord,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """The sealed candidate: complete, consistent across backends, ready to be evaluated."""
    versions = storage.versions()
    version = versions.version(index_candidate.version)
    servers = storage.servers()
    # A reused version was checked when it was sealed: its chunk table stands in for the embedded backends.
    sealed = sealed_chunk_ids(version)
    expected = set(chunks["chunk_id"].tolist())
    embedded = {"sealed_version": sealed} if sealed is not None else checked_backend_chunk_ids(version, expected)
    held = {**embedded, **(servers.chunk_ids(version.id) if servers else {})}
    differences = backend_differences(held, expected)
    disagreeing = disagreeing_backends(differences)
    consistent = not disagreeing
    if consistent and not version.sealed:
        # The ids just read are the ones checked: the stores are not opened a second time.
        seal_candidate(
            versions,
            version,
            index_candidate.fingerprint,
            held,
            run_id=context.run.run_id,
            settings_fingerprint=index_candidate.settings_fingerprint,
            base_version=index_candidate.base_version,
        )
    manifest = version.manifest() if version.sealed else {}
    record = replace(index_candidate, sealed=version.sealed)
    context.log.info(f"version {version.id}: " + ("sealed" if version.sealed else f"NOT sealed, {differences}"))
    return MaterializeResult(
        value=record,
        metadata={
            "version": version.id,
            "sealed": version.sealed,
            "reused": index_candidate.reused,
            "mode": index_candidate.mode,
            "chunks": manifest.get("chunks", len(chunks)),
            "documents": manifest.get("documents", int(chunks["doc_id"].nunique())),
            "path": str(version.path),
        },
        check_results=[
            AssetCheckResult(
                check_name="backends_hold_same_chunk_ids",
                passed=consistent,
                metadata={
                    "by_backend": MetadataValue.json(differences),
                    "backends": len(differences),
                    "disagreeing_backends": len(disagreeing),
                    "missing": sum(d["missing"] for d in differences.values()),
                    "unexpected": sum(d["unexpected"] for d in differences.values()),
                },
            )
        ],
    )
