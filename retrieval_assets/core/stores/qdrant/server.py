"""Qdrant server store: dense + SPLADE vectors in a versioned collection behind an alias.

Same data model as the embedded ``QdrantEdgeStore``: point id ``point_uuid(chunk_id)``, a named
dense vector ``dense`` and a named sparse vector ``splade`` (no IDF modifier: SPLADE weights are
learned importances), the payload as given, and payload indexes for the filter fields, with
``tenant_id`` as a tenant index (``is_tenant``: points of one tenant stored together). Booleans
are stored and matched as JSON booleans: the edge engine's "true"/"false" workaround is not
needed on the server. Payload keys that are not plain identifiers (``relations.requires``) are
quoted in filters and indexes, so they are read as one key, not a nested path.

Every request body is built by a pure function in ``requests`` (filters by ``filters``), so
their JSON can be checked against Qdrant's REST API without a server.

Builds follow Qdrant's bulk-upload advice: payload indexes are created before any point, HNSW
graph building is off (``m=0``) while points arrive and is switched on (``m`` from the config)
by ``finalize``, which then waits for the collection to turn green. Upserts go in batches with
retries and exponential backoff (429, 5xx, connection errors; a Retry-After is honoured); every
batch but the last is sent with ``wait=false`` and the last with ``wait=true``, which Qdrant
applies in order, so an ``upsert`` returns once all its points are applied.

Queries: dense, sparse, and hybrid through the Query API (both prefetches filtered, fused
server-side by RRF with a chosen ``k`` or by DBSF). Sparse vectors are sent with each index once
(``remote.merge_sparse``: repeated indices summed), which Qdrant requires.

``create`` and ``open`` check the server's version (``connection.MIN_SERVER_VERSION``) and refuse
an older one, naming both. ``quantization="int8"`` adds scalar quantization (kept in RAM) and searches rescore with the
original vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TypeVar

import numpy as np
from qdrant_client import QdrantClient, models

from retrieval_assets.core.models import SparseVector, StoreHit
from retrieval_assets.core.stores.base import (
    DenseStore,
    FieldType,
    Payload,
    SparseStore,
    as_query_vector,
    as_vector_matrix,
    check_top_k,
    point_uuid,
    validate_field_types,
    validate_payloads,
)
from retrieval_assets.core.stores.filters import MetadataFilter
from retrieval_assets.core.stores.qdrant.connection import (
    check_server_version,
    transient_wait,
)
from retrieval_assets.core.stores.qdrant.edge import DENSE_VECTOR, SPARSE_VECTOR
from retrieval_assets.core.stores.qdrant.filters import build_filter
from retrieval_assets.core.stores.qdrant.requests import (
    DISTANCES,
    SERVER_CONDITIONS,
    DistanceName,
    FusionName,
    alias_operations,
    collection_request,
    dense_request,
    hybrid_request,
    payload_index_schemas,
    sparse_request,
)
from retrieval_assets.core.stores.remote import RetryPolicy, merge_sparse, new_version

T = TypeVar("T")
FORMAT_VERSION = 1


class QdrantServerStore(DenseStore, SparseStore):
    """Dense + sparse (SPLADE) vectors with payload filters in a Qdrant server collection."""

    backend = "qdrant-server"
    batch_size = 256
    # How long finalize waits for the HNSW/payload indexes to be built (collection green).
    index_wait_s = 600.0
    poll_interval_s = 0.5

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        metadata: dict[str, Any],
        *,
        retry: RetryPolicy | None = None,
        building: bool = False,
    ):
        """Use ``create`` or ``open``."""
        self._client = client
        self.collection = collection
        self.alias: str = metadata["alias"]
        self.dim: int | None = metadata["dim"]
        self.hnsw_m: int = metadata["hnsw_m"]
        self.hnsw_ef: int | None = metadata["hnsw_ef"]
        self.quantization: str | None = metadata["quantization"]
        self.field_types: dict[str, FieldType] = dict(metadata["field_types"])
        self.retry = retry or RetryPolicy()
        self._building = building
        self._vector_names = ([DENSE_VECTOR] if self.dim else []) + [SPARSE_VECTOR]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(collection={self.collection!r}, alias={self.alias!r})"

    @classmethod
    def create(
        cls,
        client: QdrantClient,
        alias: str,
        dim: int | None,
        *,
        version: str | None = None,
        field_types: dict[str, FieldType] | None = None,
        distance: DistanceName = "cosine",
        hnsw_m: int = 16,
        hnsw_ef_construct: int = 100,
        hnsw_ef: int | None = None,
        quantization: Literal["int8"] | None = None,
        shards: int = 1,
        replication_factor: int = 1,
        retry: RetryPolicy | None = None,
    ) -> QdrantServerStore:
        """A new collection ``{alias}-{version}`` with its payload indexes, set up for a build;
        ``promote`` points ``alias`` at it. ``dim=None`` makes a sparse-only collection."""
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be positive, got {dim}")
        if distance not in DISTANCES:
            raise ValueError(f"distance must be one of {sorted(DISTANCES)}, got {distance!r}")
        if quantization not in (None, "int8"):
            raise ValueError(f"quantization must be None or 'int8', got {quantization!r}")
        types = validate_field_types(field_types)
        check_server_version(client, retry)
        name = f"{alias}-{version or new_version()}"
        metadata = {
            "backend": cls.backend,
            "format_version": FORMAT_VERSION,
            "alias": alias,
            "dim": dim,
            "distance": distance,
            "field_types": types,
            "hnsw_m": hnsw_m,
            "hnsw_ef_construct": hnsw_ef_construct,
            "hnsw_ef": hnsw_ef,
            "quantization": quantization,
        }
        request = collection_request(
            dim,
            distance=distance,
            hnsw_m=hnsw_m,
            hnsw_ef_construct=hnsw_ef_construct,
            quantization=quantization,
            shards=shards,
            replication_factor=replication_factor,
            metadata=metadata,
        )
        store = cls(client, name, metadata, retry=retry, building=True)
        create = partial(
            client.create_collection,
            name,
            vectors_config=request.vectors,
            sparse_vectors_config=request.sparse_vectors,
            hnsw_config=request.hnsw_config,
            quantization_config=request.quantization_config,
            shard_number=request.shard_number,
            replication_factor=request.replication_factor,
            metadata=request.metadata,
        )
        store._call(create, "create collection")
        for field, schema in payload_index_schemas(types).items():
            index = partial(client.create_payload_index, name, field_name=field, field_schema=schema, wait=True)
            store._call(index, "create payload index")
        return store

    @classmethod
    def open(cls, client: QdrantClient, name: str, *, retry: RetryPolicy | None = None) -> QdrantServerStore:
        """The collection behind alias ``name`` (or the collection ``name`` itself)."""
        policy = retry or RetryPolicy()
        check_server_version(client, policy)
        aliases = policy.run(client.get_aliases, transient_wait, "Qdrant get aliases").aliases
        collection = next((a.collection_name for a in aliases if a.alias_name == name), name)
        if not policy.run(lambda: client.collection_exists(collection), transient_wait, "Qdrant collection exists"):
            raise LookupError(f"no Qdrant collection or alias named {name!r}")
        info = policy.run(lambda: client.get_collection(collection), transient_wait, "Qdrant get collection")
        metadata = info.config.metadata or {}
        if metadata.get("backend") != cls.backend or metadata.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"Qdrant collection {collection} has format {metadata.get('format_version')!r} of "
                f"{metadata.get('backend')!r}; this code reads {FORMAT_VERSION} of {cls.backend!r}: rebuild it"
            )
        return cls(client, collection, metadata, retry=policy)

    # -- writes ------------------------------------------------------------------------------

    def upsert(
        self,
        payloads: Sequence[Payload],
        dense: np.ndarray | None = None,
        sparse: Sequence[SparseVector] | None = None,
    ) -> None:
        """Write points with either or both vectors; a named vector not given is kept from the
        existing point (as in ``QdrantEdgeStore.upsert``). Applied when this returns."""
        validate_payloads(payloads)
        named = self._named_vectors(len(payloads), dense, sparse)
        kept = [name for name in self._vector_names if name not in named]
        starts = range(0, len(payloads), self.batch_size)
        for start in starts:
            rows = range(start, min(start + self.batch_size, len(payloads)))
            ids = [point_uuid(payloads[row]["chunk_id"]) for row in rows]
            vectors = [{name: values(row) for name, values in named.items()} for row in rows]
            if kept:
                self._merge_kept_vectors(ids, vectors, kept)
            points = [
                models.PointStruct(id=point_id, vector=vector, payload=dict(payloads[row]))
                for point_id, vector, row in zip(ids, vectors, rows, strict=True)
            ]
            wait = start == starts[-1]  # Qdrant applies a collection's updates in order
            self._call(partial(self._client.upsert, self.collection, points=points, wait=wait), "upsert")

    def upsert_dense(self, payloads: Sequence[Payload], vectors: np.ndarray) -> None:
        self.upsert(payloads, dense=vectors)

    def upsert_sparse(self, payloads: Sequence[Payload], vectors: Sequence[SparseVector]) -> None:
        self.upsert(payloads, sparse=vectors)

    def finalize(self) -> None:
        """End a build: switch HNSW building on, then wait until the collection is green
        (graphs and payload indexes built), at most ``index_wait_s`` seconds."""
        if self._building:
            hnsw = models.HnswConfigDiff(m=self.hnsw_m)
            self._call(lambda: self._client.update_collection(self.collection, hnsw_config=hnsw), "enable HNSW")
            self._building = False
        deadline = time.monotonic() + self.index_wait_s
        nudged = False
        while True:
            status = self._call(lambda: self._client.get_collection(self.collection), "get collection").status
            if status == models.CollectionStatus.GREEN:
                return
            if status == models.CollectionStatus.GREY and not nudged:
                # Grey: optimizations pending but not started; an empty optimizer update starts them.
                empty = models.OptimizersConfigDiff()
                nudge = partial(self._client.update_collection, self.collection, optimizers_config=empty)
                self._call(nudge, "optimize")
                nudged = True
            if status == models.CollectionStatus.RED:
                raise RuntimeError(f"Qdrant collection {self.collection} is red (an optimization failed)")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Qdrant collection {self.collection} still {status.value} after {self.index_wait_s:.0f} s; "
                    "its indexes are being built (searches work, more slowly)"
                )
            self.retry.sleep(self.poll_interval_s)

    def close(self) -> None:
        """Finish a build left open; the client belongs to the caller."""
        if self._building:
            self.finalize()

    # -- lifecycle ---------------------------------------------------------------------------

    def promote(self) -> str | None:
        """Point ``alias`` at this collection in one atomic alias change; returns the collection
        it named before (None if new), for the caller to keep (rollback) or delete."""
        aliases = self._call(self._client.get_aliases, "get aliases").aliases
        previous = next((a.collection_name for a in aliases if a.alias_name == self.alias), None)
        operations = alias_operations(self.alias, self.collection)
        # Retried: the change is idempotent (delete-if-exists, then create, applied atomically).
        self._call(lambda: self._client.update_collection_aliases(change_aliases_operations=operations), "move alias")
        return None if previous == self.collection else previous

    def unpromote(self) -> None:
        """Remove ``alias`` if it names this collection (undoes a first ``promote``)."""
        aliases = self._call(self._client.get_aliases, "get aliases").aliases
        if any(a.alias_name == self.alias and a.collection_name == self.collection for a in aliases):
            delete = [models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.alias))]
            self._call(lambda: self._client.update_collection_aliases(change_aliases_operations=delete), "drop alias")

    def snapshot(self) -> str:
        """Snapshot this collection on the server (``wait=true``); returns the snapshot's name."""
        description = self._call(lambda: self._client.create_snapshot(self.collection, wait=True), "snapshot")
        if description is None:
            raise RuntimeError(f"Qdrant returned no snapshot description for {self.collection}")
        return description.name

    # -- reads -------------------------------------------------------------------------------

    def count(self) -> int:
        return self._call(lambda: self._client.count(self.collection, exact=True), "count").count

    def chunk_ids(self) -> set[str]:
        found: set[str] = set()
        offset: Any = None
        while True:
            page = partial(
                self._client.scroll, self.collection, offset=offset, limit=1024, with_payload=["chunk_id"],
                with_vectors=False,
            )
            records, offset = self._call(page, "scroll")
            found.update(record.payload["chunk_id"] for record in records if record.payload)
            if offset is None:
                return found

    def search_dense(
        self, vector: np.ndarray, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]:
        check_top_k(top_k)
        query = as_query_vector(vector, self._require_dim()).tolist()
        return self._query(dense_request(query, top_k, self._filter(filters), self._dense_params()))

    def search_sparse(
        self, vector: SparseVector, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]:
        check_top_k(top_k)
        if not vector.indices:
            return []
        return self._query(sparse_request(vector, top_k, self._filter(filters)))

    def search_hybrid(
        self,
        dense_vector: np.ndarray,
        sparse_vector: SparseVector,
        top_k: int,
        filters: Sequence[MetadataFilter] = (),
        prefetch_limit: int = 100,
        rrf_k: int = 60,
        fusion: FusionName = "rrf",
    ) -> list[StoreHit]:
        """Dense and sparse candidates fused in the server (see ``hybrid_request``)."""
        check_top_k(top_k)
        dense = as_query_vector(dense_vector, self._require_dim()).tolist()
        request = hybrid_request(
            dense,
            sparse_vector,
            top_k,
            self._filter(filters),
            params=self._dense_params(),
            prefetch_limit=prefetch_limit,
            fusion=fusion,
            rrf_k=rrf_k,
        )
        return self._query(request)

    # -- internals ---------------------------------------------------------------------------

    def _query(self, request: models.QueryRequest) -> list[StoreHit]:
        # The batch endpoint takes the built request object as is.
        batch = [request]
        (response,) = self._call(lambda: self._client.query_batch_points(self.collection, requests=batch), "query")
        return [
            StoreHit(chunk_id=point.payload["chunk_id"], score=point.score, payload=point.payload)
            for point in response.points
            if point.payload
        ]

    def _named_vectors(
        self, count: int, dense: np.ndarray | None, sparse: Sequence[SparseVector] | None
    ) -> dict[str, Callable[[int], Any]]:
        """Vector name -> the vector of row i, for the vectors given (checked against ``count``)."""
        named: dict[str, Callable[[int], Any]] = {}
        if dense is not None:
            matrix = as_vector_matrix(dense, self._require_dim(), count)
            named[DENSE_VECTOR] = lambda row: matrix[row].tolist()
        if sparse is not None:
            if len(sparse) != count:
                raise ValueError(f"got {len(sparse)} sparse vectors for {count} payloads")
            # Qdrant rejects repeated indices: each is sent once, with its values summed.
            named[SPARSE_VECTOR] = lambda row: models.SparseVector(**merge_sparse(sparse[row]).model_dump())
        if not named:
            raise ValueError("upsert needs dense or sparse vectors")
        return named

    def _merge_kept_vectors(self, ids: list[str], vectors: list[dict[str, Any]], kept: list[str]) -> None:
        position = {point_id: i for i, point_id in enumerate(ids)}
        records = self._call(
            lambda: self._client.retrieve(self.collection, ids, with_payload=False, with_vectors=kept), "retrieve"
        )
        for record in records:
            if isinstance(record.vector, dict):
                vectors[position[str(record.id)]].update(record.vector)

    def _filter(self, filters: Sequence[MetadataFilter]) -> models.Filter | None:
        return build_filter(filters, self.field_types, SERVER_CONDITIONS)

    def _dense_params(self) -> models.SearchParams | None:
        rescore = None
        if self.quantization:
            # Candidates from the int8 vectors, re-ranked with the originals.
            rescore = models.QuantizationSearchParams(rescore=True, oversampling=2.0)
        if self.hnsw_ef is None and rescore is None:
            return None
        return models.SearchParams(hnsw_ef=self.hnsw_ef, quantization=rescore)

    def _require_dim(self) -> int:
        if not self.dim:
            raise ValueError(f"Qdrant collection {self.collection} was created without a dense vector (dim=None)")
        return self.dim

    def _call(self, call: Callable[[], T], what: str) -> T:
        return self.retry.run(call, transient_wait, f"Qdrant {what} on {self.collection}")
