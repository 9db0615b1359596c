"""Qdrant server requests: every request body the server store sends, built by pure functions.

Each returns ``qdrant_client.models`` objects, so their JSON can be checked against Qdrant's
REST API without a server: the collection (named vectors, HNSW, optional int8 quantization,
metadata), its payload indexes, the filter (``SERVER_CONDITIONS`` for ``filters.build_filter``),
dense, sparse and hybrid queries, and the alias switch.
"""

from __future__ import annotations

from typing import Any, Literal

from qdrant_client import models

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import FieldType
from retrieval_assets.core.stores.qdrant.edge import DENSE_VECTOR, SPARSE_VECTOR
from retrieval_assets.core.stores.qdrant.filters import ConditionTypes, payload_key
from retrieval_assets.core.stores.remote import merge_sparse

DistanceName = Literal["cosine", "dot"]
FusionName = Literal["rrf", "dbsf"]
DISTANCES = {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT}
_INDEX_SCHEMAS: dict[str, models.PayloadSchemaType | models.IntegerIndexParams] = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, lookup=True, range=True),
    "float": models.PayloadSchemaType.FLOAT,
    "bool": models.PayloadSchemaType.BOOL,
}
# Filters spelled in qdrant-client's models; the server keeps booleans as JSON booleans.
SERVER_CONDITIONS: ConditionTypes[models.Condition, models.Filter] = ConditionTypes(
    match_any=lambda key, values: models.FieldCondition(key=key, match=models.MatchAny(any=values)),
    match_bool=lambda key, value: models.FieldCondition(key=key, match=models.MatchValue(value=value)),
    range=lambda key, gte, lte: models.FieldCondition(key=key, range=models.Range(gte=gte, lte=lte)),
    must=lambda conditions: models.Filter(must=conditions),
    should=lambda conditions: models.Filter(should=conditions),
)


def collection_request(
    dim: int | None,
    *,
    distance: DistanceName = "cosine",
    hnsw_m: int = 16,
    hnsw_ef_construct: int = 100,
    quantization: Literal["int8"] | None = None,
    defer_indexing: bool = True,
    shards: int = 1,
    replication_factor: int = 1,
    metadata: dict[str, Any] | None = None,
) -> models.CreateCollection:
    """``PUT /collections/{name}``: named vectors, HNSW, optional int8 quantization, metadata."""
    dense = {DENSE_VECTOR: models.VectorParams(size=dim, distance=DISTANCES[distance])} if dim else {}
    scalar = None
    if quantization == "int8":
        scalar = models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99, always_ram=True)
        )
    return models.CreateCollection(
        vectors=dense,
        sparse_vectors={SPARSE_VECTOR: models.SparseVectorParams()},
        # m=0 while a build uploads (no graph to rebuild per batch); finalize sets the real m.
        hnsw_config=models.HnswConfigDiff(m=0 if defer_indexing else hnsw_m, ef_construct=hnsw_ef_construct),
        quantization_config=scalar,
        shard_number=shards,
        replication_factor=replication_factor,
        metadata=metadata,
    )


def payload_index_schemas(field_types: dict[str, FieldType]) -> dict[str, Any]:
    """``PUT /collections/{name}/index`` per field: tenant index on tenant_id, keyword identifiers,
    typed indexes for the filter fields."""
    schemas: dict[str, Any] = {
        "tenant_id": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
        "doc_id": models.PayloadSchemaType.KEYWORD,
        "section": models.PayloadSchemaType.KEYWORD,
    }
    for field, kind in field_types.items():
        schemas[payload_key(field)] = _INDEX_SCHEMAS[kind]
    return schemas


def dense_request(
    vector: list[float], top_k: int, flt: models.Filter | None, params: models.SearchParams | None = None
) -> models.QueryRequest:
    """``POST /collections/{name}/points/query``: nearest ``dense`` vectors, filtered."""
    return models.QueryRequest(
        query=vector, using=DENSE_VECTOR, filter=flt, params=params, limit=top_k, with_payload=True
    )


def sparse_request(vector: SparseVector, top_k: int, flt: models.Filter | None) -> models.QueryRequest:
    """``POST /collections/{name}/points/query``: best ``splade`` dot products, filtered."""
    vector = merge_sparse(vector)
    query = models.SparseVector(indices=vector.indices, values=vector.values)
    return models.QueryRequest(query=query, using=SPARSE_VECTOR, filter=flt, limit=top_k, with_payload=True)


def hybrid_request(
    dense: list[float],
    sparse: SparseVector,
    top_k: int,
    flt: models.Filter | None,
    *,
    params: models.SearchParams | None = None,
    prefetch_limit: int = 100,
    fusion: FusionName = "rrf",
    rrf_k: int = 60,
) -> models.QueryRequest:
    """Dense and sparse prefetches (each filtered, ``max(prefetch_limit, top_k)`` candidates)
    fused by the server: RRF with constant ``rrf_k``, or DBSF (score-normalised sum)."""
    limit = max(prefetch_limit, top_k)
    prefetches = [models.Prefetch(query=dense, using=DENSE_VECTOR, filter=flt, params=params, limit=limit)]
    if sparse.indices:
        sparse = merge_sparse(sparse)
        query = models.SparseVector(indices=sparse.indices, values=sparse.values)
        prefetches.append(models.Prefetch(query=query, using=SPARSE_VECTOR, filter=flt, limit=limit))
    if fusion == "rrf":
        fused: models.RrfQuery | models.FusionQuery = models.RrfQuery(rrf=models.Rrf(k=rrf_k))
    elif fusion == "dbsf":
        fused = models.FusionQuery(fusion=models.Fusion.DBSF)
    else:
        raise ValueError(f"fusion must be 'rrf' or 'dbsf', got {fusion!r}")
    return models.QueryRequest(prefetch=prefetches, query=fused, limit=top_k, with_payload=True)


def alias_operations(alias: str, collection: str) -> list[models.AliasOperations]:
    """``POST /collections/aliases``: drop ``alias`` (if it exists) and point it at ``collection``,
    applied by the server as one atomic change."""
    return [
        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)),
        models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias)),
    ]
