"""Delta builds: a candidate that differs from the promoted version by a few chunks is built from
a copy of that version's indexes, applying only the changes, instead of rewriting every index.

``decide_build`` compares the candidate's chunks with the promoted version's chunk table (written
when it was sealed) and either plans a delta or says why the candidate is built in full: no
promoted version, other models or index settings, too large a change, or filter fields whose
type changed (the qdrant-edge payload indexes are fixed when a shard is created). The plan is
written into the candidate (``delta.json``), where every index step reads it and where pruning
sees which version an unfinished delta still copies from.

What a delta does per index, so that it holds the same chunk ids and gives the same answers as a
full build of the same catalog:

* FAISS (flat, exact): a copy of the base, ``remove_ids`` of the deleted chunks, then the
  upserted chunks (new or changed rows) added with their cached vectors. Scores are computed per
  vector, so they are identical; only equal scores may come back in another order.
* qdrant-edge: a copy of the base shard, deletes and upserts. SPLADE search is exact (an inverted
  index; on 104k ACL chunks the top 100 equalled a full build's, scores within 1.2e-7), and dense
  search is exact on segments below the full-scan threshold; on a larger shard its HNSW graph
  differs from a full build's, as any two HNSW builds do (same recall against exact search).
* tantivy (an index per tenant): a tenant none of whose chunks changed keeps the base's index,
  its files hard-linked (tantivy never rewrites a file). A changed tenant's index is rebuilt
  from its payloads (the base's, reused for unchanged chunks: 8 s for 104k ACL chunks), since
  deleted documents stay in BM25's document frequencies and average length until their
  segment is merged, and tantivy-py cannot ask for a merge: on the bundled SciFact sample, 10
  changed and 1 removed document changed the top 20 of 36 of 61 queries (scores off by up to
  0.65). In an approximate version (HNSW, so already not a full build's twin) a changed
  tenant's index is instead the base's with the deletes and upserts applied in place, until
  the deleted documents it counts pass ``REBUILD_DELETED_FRACTION`` of its documents (the
  build manifest's ``deleted_in_statistics``); one changed document among many barely moves
  the statistics, and rebuilding 200k chunks for it took 47 s.
* vocabulary: every term's document counts (in all, per source and per tenant) are kept with the
  version and updated for the changed documents only; terms are selected and embedded (from the
  terms cache) as in a full build.
* knowledge graph: rebuilt, as in a full build (0.2 s for 103k ACL documents).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval_assets.core.embed.vectors import dense_matrix
from retrieval_assets.core.faults import fault_point
from retrieval_assets.core.index.build import (
    chunk_table,
    index_payloads,
    point_batches,
    sealed_chunk_ids,
    write_faiss_points,
    write_lexical_index,
    write_lexical_manifest,
    write_qdrant_points,
)
from retrieval_assets.core.index.facets import FacetCounts, count_facets, keyword_fields
from retrieval_assets.core.index.layout import read_build_manifest
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.index.versions import CandidateRecord, IndexVersion, IndexVersions, VersionError
from retrieval_assets.core.index.vocabulary import (
    TENANT_COUNT_COLUMNS,
    chunk_texts,
    payload_texts,
    update_term_counts,
)
from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.io.memory import collection_paused
from retrieval_assets.core.io.parted import PartedTable
from retrieval_assets.core.io.tables import rows_where, write_parquet
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.stores.base import (
    FieldType,
    IndexStore,
    Payload,
    Stemmer,
    combine_field_kinds,
    field_kinds,
    field_types_from_kinds,
    parse_payload,
    read_manifest,
    validate_field_types,
)
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import FORMAT_VERSION as TANTIVY_FORMAT_VERSION
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore

Store = TypeVar("Store", FaissDenseStore, QdrantEdgeStore)

# A tenant's lexical index patched in place counts its deleted documents in BM25's statistics;
# past this share of its documents it is rebuilt instead (as FAISS compacts its tombstones).
REBUILD_DELETED_FRACTION = 0.2


@dataclass(frozen=True)
class DeltaPlan:
    """How a candidate differs from its base version, chunk by chunk."""

    base: str
    # New chunks and chunks whose row (text, content hash or metadata) changed.
    upserted: tuple[str, ...]
    # Chunks of the base the candidate no longer has.
    deleted: tuple[str, ...]
    # Documents with an upserted or deleted chunk.
    documents: tuple[str, ...]
    base_chunks: int
    candidate_chunks: int

    @property
    def changed_fraction(self) -> float:
        return (len(self.upserted) + len(self.deleted)) / max(self.base_chunks, self.candidate_chunks, 1)

    def upserted_rows(self, chunks: pd.DataFrame) -> pd.DataFrame:
        return rows_where(chunks, chunks["chunk_id"].isin(self.upserted))


@dataclass(frozen=True)
class BuildDecision:
    """How ``index_candidate`` builds a new version: a delta (``plan``) or in full (None), and
    why; for a delta, the chunk rows of the documents it changes, as read to decide."""

    reason: str
    plan: DeltaPlan | None = None
    rows: pd.DataFrame | None = field(default=None, repr=False)


# The chunk rows of these documents (a stored chunk table's ``read_where``): a decision needs
# the changed documents' rows only, not a frame of every chunk.
ChunkRowsOf = Callable[[Collection[str]], pd.DataFrame]


def plan_delta(chunks: pd.DataFrame | None, base: IndexVersion, table: pd.DataFrame | None = None) -> DeltaPlan:
    """Compare ``chunks`` (whose ``chunk_table`` the caller may have made already: then
    ``chunks`` may be None) with the chunk table ``base`` was sealed with."""
    before = pd.read_parquet(base.layout.chunks)
    if table is None and chunks is None:
        raise ValueError("plan_delta needs the chunks or their chunk table")
    current = chunk_table(chunks) if table is None else table
    ids_before = pd.Index(before["chunk_id"].astype(object))
    position = ids_before.get_indexer(current["chunk_id"].astype(object))
    hashes_before = before["row_hash"].to_numpy()
    same = (position >= 0) & (hashes_before[np.maximum(position, 0)] == current["row_hash"].to_numpy())
    upserted = current.loc[~same, "chunk_id"].tolist()
    # In Arrow, not as Python sets of a million ids each (0.7 s a delta).
    gone = ~_holding(before["chunk_id"], current["chunk_id"])
    deleted = sorted(before.loc[gone, "chunk_id"].tolist())
    documents = set(current.loc[~same, "doc_id"])
    documents.update(before.loc[gone, "doc_id"])
    return DeltaPlan(
        base=base.id,
        upserted=tuple(upserted),
        deleted=tuple(deleted),
        documents=tuple(sorted(documents)),
        base_chunks=len(before),
        candidate_chunks=len(current),
    )


def has_unqualified_chunk_ids(base: IndexVersion) -> bool:
    """Whether ``base`` was built before chunk ids named their tenant: its chunk ids are
    ``{doc_id}#{n}`` (``chunk_document`` gives the bare id), where a build now writes
    ``{tenant}/{doc_id}#{n}``. Such a version still serves as it is; a delta from it would
    replace every chunk."""
    table = pq.read_table(base.layout.chunks, columns=["chunk_id", "doc_id"])
    # What comes before the last "#" (in Arrow: half the time of pandas' rpartition).
    heads = pc.struct_field(pc.extract_regex(table["chunk_id"], r"(?s)^(?P<head>.*)#[^#]*$"), [0])
    return bool(pc.any(pc.equal(heads, table["doc_id"])).as_py())


def decide_build(
    chunks: pd.DataFrame | ChunkRowsOf,
    settings_fingerprint: str,
    base: IndexVersion | None,
    max_changed_fraction: float,
    context: ContextTokenSettings | None = None,
    table: pd.DataFrame | None = None,
) -> BuildDecision:
    """A delta from ``base`` (the promoted version) when it is possible and the change is small
    enough; otherwise a full build, with the reason. ``table``: the ``chunk_table`` of ``chunks``
    when the caller has it; given it, ``chunks`` may be the ``ChunkRowsOf`` them instead."""
    if callable(chunks) and table is None:
        raise ValueError("decide_build reads chunk rows by document only beside their chunk table")
    if max_changed_fraction <= 0:
        return BuildDecision("delta builds are off (delta_max_changed_fraction = 0)")
    if base is None:
        return BuildDecision("no promoted version to start from")
    if not base.sealed:
        return BuildDecision(f"the promoted version {base.id} is incomplete")
    manifest = base.manifest()
    if not (
        "settings_fingerprint" in manifest
        and base.layout.chunks.is_file()
        and base.layout.vocabulary_counts.is_file()
        and "field_kinds" in read_build_manifest(base.layout.lexical)
    ):
        return BuildDecision(f"the promoted version {base.id} predates delta builds (no chunk table)")
    # Counts without tenants cannot be updated into a vocabulary whose terms name their tenants.
    if not set(TENANT_COUNT_COLUMNS) <= set(pq.read_schema(base.layout.vocabulary_counts).names):
        return BuildDecision(f"the promoted version {base.id} predates per-tenant term counts")
    if manifest["settings_fingerprint"] != settings_fingerprint:
        return BuildDecision(f"models or index settings changed since {base.id}")
    if has_unqualified_chunk_ids(base):
        return BuildDecision(
            f"the promoted version {base.id} predates chunk ids qualified by tenant ({{doc_id}}#{{n}}): "
            "every chunk id changes, so the candidate is built in full"
        )
    plan = plan_delta(None if callable(chunks) else chunks, base, table)
    changed = len(plan.upserted) + len(plan.deleted)
    if plan.changed_fraction > max_changed_fraction:
        return BuildDecision(
            f"{changed} of {max(plan.base_chunks, plan.candidate_chunks)} chunks changed "
            f"({plan.changed_fraction:.1%}), above delta_max_changed_fraction {max_changed_fraction:.1%}"
        )
    if callable(chunks):
        rows = chunks(plan.documents)
    else:
        rows = rows_where(chunks, _holding(chunks["doc_id"], plan.documents))
    _, base_qdrant = read_manifest(base.layout.qdrant, QdrantEdgeStore.backend)
    fields_before = base_qdrant["field_types"]
    fields_now = validate_field_types(field_types_from_kinds(delta_field_kinds(base, rows, plan, context)))
    if fields_now != fields_before:
        changes = sorted(
            f"{field}: {fields_before.get(field, 'absent')} -> {fields_now.get(field, 'absent')}"
            for field in {*fields_before, *fields_now}
            if fields_before.get(field) != fields_now.get(field)
        )
        return BuildDecision(f"filter field types changed since {base.id} ({'; '.join(changes)})")
    return BuildDecision(
        f"delta from {base.id}: {len(plan.upserted)} chunks upserted, {len(plan.deleted)} deleted "
        f"({plan.changed_fraction:.2%} of the chunks, {len(plan.documents)} documents)",
        plan,
        rows,
    )


def record_decision(candidate: IndexVersion, decision: BuildDecision) -> None:
    """Write the plan into the candidate (or remove a stale one): the index steps read it, and
    pruning spares its base until the candidate is sealed. Beside it, the chunk rows of the
    documents it changes (``Delta.chunk_rows``)."""
    layout = candidate.layout
    if decision.plan is None:
        layout.delta_plan.unlink(missing_ok=True)
        layout.delta_chunks.unlink(missing_ok=True)
        return
    if decision.rows is None:
        raise ValueError("a delta decision carries the chunk rows of the documents it changes")
    write_parquet(decision.rows, layout.delta_chunks)
    write_json({**asdict(decision.plan), "reason": decision.reason}, layout.delta_plan)


def _holding(column: pd.Series, values: pd.Series | Collection[str]) -> np.ndarray:
    """Whether each value of a string column is one of ``values`` (Arrow's is_in: pandas' isin
    on Arrow strings loops in Python)."""
    value_set = pa.array(values if isinstance(values, pd.Series) else list(values), type=pa.string())
    return pc.is_in(pa.array(column, type=pa.string()), value_set=value_set).to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class Delta:
    """A candidate being built as a delta: the base version it copies and the plan it applies."""

    base: IndexVersion
    plan: DeltaPlan
    rows: Path | None = None  # the candidate's ``delta_chunks``

    def chunk_rows(self, chunks: PartedTable, chunk_ids: Collection[str] | None = None) -> pd.DataFrame:
        """The stored rows of the changed documents' chunks (of ``chunk_ids`` among them, when
        given), from those the candidate set aside (``record_decision``), else searched for in
        ``chunks``: 10k chunks scattered over a million took 4 s an index step to find."""
        if self.rows is not None and self.rows.is_file():
            frame = pd.read_parquet(self.rows)
            return frame if chunk_ids is None else rows_where(frame, _holding(frame["chunk_id"], chunk_ids))
        if chunk_ids is None:
            return chunks.read_where("doc_id", self.plan.documents).to_pandas()
        return _chunk_rows(chunks, chunk_ids)

    def open_copy(self, store_type: type[Store], source: Path, target: Path) -> Store:
        """A copy of one of the base's indexes at ``target`` (replacing what an interrupted run
        left; each store copies itself as it best can), opened, with the deleted chunks removed."""
        if not self.base.sealed:
            raise VersionError(f"delta base {self.base.id} is no longer complete; re-run the build")
        store = store_type.open_copy(source, target)
        store.delete(self.plan.deleted)
        return store


def delta_held_chunk_ids(store: IndexStore, delta: Delta, expected: set[str]) -> set[str]:
    """The chunk ids a store built as ``delta`` holds, checked at the cost of the delta, not of
    the version (a 1M-point qdrant-edge shard took 9 s to list): the base's ids, checked when it
    was sealed, with the plan applied, when they are ``expected`` and the store holds every
    upserted chunk, none of the deleted ones and no other point. Otherwise the store's own
    listing, so that a disagreement is named as a full build's is. Only for a store that holds a
    chunk id once at most (FAISS's id map, qdrant's point ids), whose count then proves the rest."""
    base = sealed_chunk_ids(delta.base)
    upserted, deleted = set(delta.plan.upserted), set(delta.plan.deleted)
    if (
        base is not None
        and (base - deleted) | upserted == expected
        and store.count() == len(expected)
        and store.holding(upserted | deleted) == upserted
    ):
        return expected
    return store.chunk_ids_given(expected)


def load_delta(versions: IndexVersions, candidate: CandidateRecord) -> Delta | None:
    """The delta ``index_candidate`` planned for ``candidate``; None when it is reused or built in full."""
    if candidate.reused or candidate.base_version is None:
        return None
    path = versions.version(candidate.version).layout.delta_plan
    plan = read_plan(path)
    if plan.base != candidate.base_version:
        raise VersionError(f"{path} plans a delta from {plan.base}, the candidate names {candidate.base_version}")
    return Delta(versions.version(plan.base), plan, versions.version(candidate.version).layout.delta_chunks)


def read_plan(path: Path) -> DeltaPlan:
    fields: dict[str, Any] = json.loads(path.read_text())
    fields.pop("reason", None)
    # JSON gives lists where the plan holds tuples.
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return DeltaPlan(**values)


def delta_field_kinds(
    base: IndexVersion,
    chunks: pd.DataFrame,
    plan: DeltaPlan,
    context: ContextTokenSettings | None = None,
    replaced: Collection[Payload] | None = None,
    upserted: Collection[Payload] | None = None,
) -> dict[str, dict[str, int]]:
    """``field_kinds`` of every candidate payload, from the base's (in its tantivy build
    manifest) less its payloads of the changed and removed chunks (``replaced``, when the caller
    has read them) plus the upserted ones (``upserted``, when the caller has made them): exact,
    also when a removal leaves a field with fewer kinds, without reading every payload."""
    before = read_build_manifest(base.layout.lexical)["field_kinds"]
    if replaced is None:
        replaced = replaced_payloads(base, plan)
    if upserted is None:
        upserted = index_payloads(plan.upserted_rows(chunks), context)
    return combine_field_kinds((before, 1), (field_kinds(replaced), -1), (field_kinds(upserted), 1))


def replaced_payloads(base: IndexVersion, plan: DeltaPlan) -> list[Payload]:
    """The base's payloads of the chunks a delta changes or removes."""
    return list(FaissDenseStore.stored_payloads(base.layout.faiss, {*plan.upserted, *plan.deleted}).values())


def kept_payloads(base: IndexVersion, plan: DeltaPlan) -> Iterator[Payload]:
    """The base's payloads of the chunks a delta keeps unchanged, in the base's order, parsed one
    at a time and not kept (all of them at once were most of a 1M delta's 11.3 GB tantivy step)."""
    changed = pa.array([*plan.upserted, *plan.deleted], pa.string())
    for batch in FaissDenseStore.stored_payload_batches(base.layout.faiss):
        kept = batch.filter(pc.invert(pc.is_in(batch.column("chunk_id"), value_set=changed)))
        yield from map(parse_payload, kept.column("payload").to_pylist())


def candidate_payloads(
    base: IndexVersion,
    chunks: pd.DataFrame,
    plan: DeltaPlan,
    context: ContextTokenSettings | None = None,
    upserted: Collection[Payload] | None = None,
) -> tuple[list[Payload], list[str | None]]:
    """The store payloads of ``chunks`` (candidate chunks), in their order, and their JSON text
    where the base saved it: the base's payload for an unchanged chunk (same row, same settings:
    the same payload, without deriving it again), a new one (no text) for an upserted chunk
    (from ``upserted``, every upserted chunk's payload, when the caller has made them)."""
    if upserted is None:
        upserted = index_payloads(plan.upserted_rows(chunks), context)
    fresh = {payload["chunk_id"]: payload for payload in upserted}
    chunk_ids = chunks["chunk_id"].tolist()
    kept = FaissDenseStore.stored_payload_json(base.layout.faiss, [c for c in chunk_ids if c not in fresh])
    payloads: list[Payload] = []
    texts: list[str | None] = []
    with collection_paused():
        for chunk_id in chunk_ids:
            payload = fresh.get(chunk_id)
            text: str | None = None
            if payload is None:
                text = kept[chunk_id]
                payload = parse_payload(text)
            payloads.append(payload)
            texts.append(text)
    return payloads, texts


def delta_faiss_index(
    delta: Delta,
    path: Path,
    chunks: pd.DataFrame,
    dense: pd.DataFrame,
    model_name: str,
    context: ContextTokenSettings | None = None,
) -> FaissDenseStore:
    """The base's FAISS index with the deleted chunks removed and the upserted ones (re)added."""
    payloads = index_payloads(delta.plan.upserted_rows(chunks), context)
    matrix = dense_matrix(dense, [payload["chunk_id"] for payload in payloads])
    store = delta.open_copy(FaissDenseStore, delta.base.layout.faiss, path)
    return write_faiss_points(store, [(payloads, matrix)], model_name, base_version=delta.base.id)


def delta_qdrant_index(
    delta: Delta,
    path: Path,
    chunks: pd.DataFrame,
    dense: pd.DataFrame,
    sparse: pd.DataFrame,
    dense_model: str,
    sparse_model: str,
    context: ContextTokenSettings | None = None,
) -> QdrantEdgeStore:
    """The base's qdrant-edge shard with the deleted chunks removed and the upserted ones written."""
    _, _, batches = point_batches(PointTables.in_memory(delta.plan.upserted_rows(chunks), dense, sparse), context)
    store = delta.open_copy(QdrantEdgeStore, delta.base.layout.qdrant, path)
    return write_qdrant_points(
        store, batches, dense_model, sparse_model, defer_optimizing=True, base_version=delta.base.id
    )


def delta_lexical_index(
    delta: Delta,
    path: Path,
    keys: pd.DataFrame,
    chunks: PartedTable,
    context: ContextTokenSettings | None = None,
    stemmer: Stemmer = "english",
) -> TantivyLexicalStore:
    """The base's tantivy index, tenant by tenant (see the module notes): a tenant with no
    changed chunk keeps the base's index, hard-linked; a changed tenant's index is rebuilt from
    its payloads (the base's for its unchanged chunks), or, in an approximate version, patched
    in place until the deleted documents its statistics still count pass
    ``REBUILD_DELETED_FRACTION`` of its documents. ``keys`` are every candidate chunk's
    ``chunk_id`` and ``tenant_id``; of the stored ``chunks`` only the rows written are read."""
    plan, base = delta.plan, delta.base.layout.lexical
    upserted = set(plan.upserted)
    upserted_payloads = index_payloads(delta.chunk_rows(chunks, upserted), context)
    replaced = replaced_payloads(delta.base, plan)
    kinds = delta_field_kinds(delta.base, keys, plan, context, replaced, upserted_payloads)
    _, base_manifest = read_manifest(base, TantivyLexicalStore.backend)
    field_types = validate_field_types(field_types_from_kinds(kinds))
    if base_manifest["format_version"] != TANTIVY_FORMAT_VERSION or base_manifest["field_types"] != field_types:
        payloads, encoded = candidate_payloads(delta.base, chunks.read_pandas(), plan, context, upserted_payloads)
        tenants = {str(payload["tenant_id"]) for payload in payloads}
        return write_lexical_index(path, [(payloads, encoded)], kinds, tenants, stemmer, base_version=delta.base.id)
    # Documents each tenant's index loses: its deleted chunks and the old rows of its changed ones.
    removed = Counter(str(payload["tenant_id"]) for payload in replaced)
    touched = set(removed) | {str(p["tenant_id"]) for p in upserted_payloads}
    tenants = keys["tenant_id"].astype(str)
    live = Counter(tenants.tolist())
    counted = {t: n for t, n in read_build_manifest(base).get("deleted_in_statistics", {}).items() if t in live}
    patched: set[str] = set()
    if _is_approximate(delta.base):
        patched = {t for t in touched if counted.get(t, 0) + removed[t] <= REBUILD_DELETED_FRACTION * live[t]}
    rebuilt = touched - patched
    store = TantivyLexicalStore.open_linked(base, path, set(base_manifest["tenant_dirs"]) - rebuilt)
    store.delete(plan.deleted)
    # Payloads are made only for what is written: a rebuilt tenant's every chunk, a patched
    # tenant's upserted ones (every candidate's payload at once: 11.3 GB for a 1M delta's step).
    written = tenants.isin(rebuilt) | (tenants.isin(patched) & keys["chunk_id"].isin(upserted))
    written_ids = rows_where(keys, written)["chunk_id"].tolist()
    # A patched tenant's rows are among the delta's; a rebuilt one's are every chunk of it.
    patched_only = upserted.issuperset(written_ids)
    rows = delta.chunk_rows(chunks, written_ids) if patched_only else _chunk_rows(chunks, written_ids)
    added, encoded = candidate_payloads(delta.base, rows, plan, context, upserted_payloads)
    store.add(added, encoded)
    fault_point("tantivy_index")
    store.finalize()
    for tenant in rebuilt:
        counted.pop(tenant, None)
    for tenant in patched:
        counted[tenant] = counted.get(tenant, 0) + removed[tenant]
    facet_counts = delta_facet_counts(delta.base, replaced, upserted_payloads, field_types, set(live))
    if facet_counts is None:
        facet_counts = count_facets(chain(upserted_payloads, kept_payloads(delta.base, plan)), field_types)
    write_lexical_manifest(
        store,
        facet_counts,
        kinds,
        base_version=delta.base.id,
        rebuilt_tenants=sorted(rebuilt),
        patched_tenants=sorted(patched),
        deleted_in_statistics=dict(sorted(counted.items())),
    )
    return store


def _chunk_rows(chunks: PartedTable, chunk_ids: Collection[str]) -> pd.DataFrame:
    """The stored chunk rows of these ids, in table order, read from the row groups holding them."""
    return chunks.read_where("chunk_id", chunk_ids).to_pandas()


def delta_facet_counts(
    base: IndexVersion,
    removed: Iterable[Payload],
    added: Iterable[Payload],
    field_types: Mapping[str, FieldType],
    tenants: Collection[str],
) -> FacetCounts | None:
    """The base's facet counts less the payloads a delta removes (its changed and deleted
    chunks' old ones) plus those it adds; None where they must be counted from every payload
    again: a base saved without counts, or a field too large to count that may have fallen to
    a facet's size (``FacetCounts.exact``)."""
    counts = FacetCounts.load(base.layout.lexical)
    if counts is None:
        return None
    try:
        counts.remove(removed)
    except KeyError:  # a payload the counts never held: count again rather than trust them
        return None
    counts.add(added, keyword_fields(field_types))
    counts.keep_tenants(tenants)
    return counts if counts.exact else None


def _is_approximate(version: IndexVersion) -> bool:
    """Whether ``version``'s dense index is approximate (IVF or HNSW): a large version, whose
    deltas patch the lexical index in place as well."""
    _, manifest = read_manifest(version.layout.faiss, FaissDenseStore.backend)
    return manifest.get("index_type", "flat") != "flat"


def delta_term_counts(delta: Delta, chunks: pd.DataFrame) -> pd.DataFrame:
    """The base's term counts without the changed documents as they were, with them as they are."""
    documents = set(delta.plan.documents)
    before = pd.read_parquet(delta.base.layout.chunks, columns=["chunk_id", "doc_id"])
    old_chunks = before.loc[before["doc_id"].isin(documents), "chunk_id"]
    old = FaissDenseStore.stored_payloads(delta.base.layout.faiss, set(old_chunks)).values()
    new = rows_where(chunks, chunks["doc_id"].isin(documents))
    return update_term_counts(
        pd.read_parquet(delta.base.layout.vocabulary_counts), payload_texts(old), chunk_texts(new)
    )
