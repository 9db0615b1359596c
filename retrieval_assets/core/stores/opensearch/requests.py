"""OpenSearch request bodies: searches (BM25 text, SPLADE, first chunks, id pages), bulk lines, aliases.

Every metadata filter (tenant included) goes in ``filter`` context: cached, unscored, applied
while collecting the top k. Text is matched by ``multi_match`` (the query's words, then one
clause per expansion word weighted by its weight); ``tags`` values add ``TAG_SCORE`` each as a
``constant_score`` ``should`` next to the text ``must``, so they only reorder what the words
match, like the tantivy store. SPLADE is a ``bool`` of ``rank_feature`` clauses with the
``linear`` function boosted by the query weight, which is exactly the dot product; it sends at
most ``MAX_SPARSE_QUERY_TERMS`` (1000) terms, the heaviest, so a query stays under
``indices.query.bool.max_clause_count`` (default 1024).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.stores.base import TAG_SCORE, Payload
from retrieval_assets.core.stores.opensearch.mapping import (
    CONTENT_FIELD,
    MAPPING_VERSION,
    ORDINAL_FIELD,
    PAYLOAD_FIELD,
    SPARSE_FIELD,
)
from retrieval_assets.core.stores.remote import merge_sparse, strongest_terms

logger = logging.getLogger(__name__)

# Replaces the stored document but keeps its SPLADE features: a lexical write must not drop them.
KEEP_FEATURES_SCRIPT = (
    "def kept = ctx._source.get(params.field); ctx._source.clear(); ctx._source.putAll(params.doc); "
    "if (kept != null) { ctx._source.put(params.field, kept); }"
)
# SPLADE query terms sent to OpenSearch: each is one ``rank_feature`` clause, and a query may
# hold at most ``indices.query.bool.max_clause_count`` clauses (1024 by default, counted over
# the whole query). 1000 leaves room for the filter clauses; the lightest terms are dropped.
MAX_SPARSE_QUERY_TERMS = 1000


def text_query(
    query: str,
    top_k: int,
    filter_clauses: list[dict[str, Any]],
    *,
    title_boost: float,
    expansion_terms: Mapping[str, float] | None = None,
    tags_field: str | None = None,
    tag_terms: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The ``_search`` body of a BM25 search; None when there is nothing to match. Tags boost
    only where the index has a ``tags_field``."""
    fields = [CONTENT_FIELD] + ([f"title^{title_boost:g}"] if title_boost > 0 else [])
    clauses = [_match(query, fields, 1.0)] if query.strip() else []
    for word, weight in (expansion_terms or {}).items():
        if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
            raise ValueError(f"expansion term {word!r}: weight must be in [0, 1], got {weight}")
        if weight > 0.0 and word.strip():
            clauses.append(_match(word, fields, weight))
    if not clauses:
        return None
    bool_query: dict[str, Any] = {
        "must": [{"bool": {"should": clauses, "minimum_should_match": 1}}],
        "filter": filter_clauses,
    }
    if tags_field is not None and tag_terms:
        bool_query["should"] = [
            {"constant_score": {"filter": {"term": {tags_field: tag}}, "boost": TAG_SCORE}}
            for tag in dict.fromkeys(tag_terms)
        ]
    return _search_body(bool_query, top_k)


def sparse_query(
    vector: SparseVector, top_k: int, filter_clauses: list[dict[str, Any]], *, max_terms: int, index: str
) -> dict[str, Any] | None:
    """The ``_search`` body of a SPLADE search; None for a vector without positive weights.
    Only the ``max_terms`` heaviest terms become clauses (the clause limit)."""
    features = sparse_features(vector)
    if not features:
        return None
    # The retriever already sends at most max_query_terms; this keeps any other caller under the limit.
    positive = SparseVector(indices=[int(term) for term in features], values=list(features.values()))
    capped, cut = strongest_terms(positive, max_terms)
    if cut:
        logger.info("SPLADE query on %s cut to its heaviest terms (clause limit): %s", index, cut)
    clauses = [
        {"rank_feature": {"field": f"{SPARSE_FIELD}.{term}", "linear": {}, "boost": weight}}
        for term, weight in zip(capped.indices, capped.values, strict=True)
    ]
    bool_query = {"should": clauses, "minimum_should_match": 1, "filter": filter_clauses}
    return _search_body(bool_query, top_k)


def first_chunks_query(doc_ids: list[str], filter_clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``_search`` body of ``fetch_documents``: each document's first chunk (lowest
    ``#ordinal``) passing the filters, one ``collapse`` on doc_id doing the choosing."""
    return {
        "size": len(doc_ids),
        "track_total_hits": False,
        "_source": [PAYLOAD_FIELD],
        "query": {"bool": {"filter": [{"terms": {"doc_id": doc_ids}}, *filter_clauses]}},
        "collapse": {"field": "doc_id"},
        "sort": [{ORDINAL_FIELD: {"order": "asc", "missing": "_last"}}, {"chunk_id": "asc"}],
    }


def chunk_ids_page(size: int, after: list[Any] | None) -> dict[str, Any]:
    """The ``_search`` body of one page of chunk ids, ``search_after`` on the keyword's doc values."""
    body: dict[str, Any] = {"size": size, "_source": False, "track_total_hits": False, "sort": [{"chunk_id": "asc"}]}
    if after is not None:
        body["search_after"] = after
    return body


def bulk_lines(
    payload: Payload, source: dict[str, Any], sparse: SparseVector | None, *, keep_features: bool
) -> str:
    """The ``_bulk`` action and document of one chunk: indexed whole (with ``sparse`` features
    when given), or, with ``keep_features``, a scripted update keeping the stored features."""
    if not keep_features:
        if sparse is not None:
            source[SPARSE_FIELD] = sparse_features(sparse)
        action: dict[str, Any] = {"index": {"_id": payload["chunk_id"]}}
        body: dict[str, Any] = source
    else:
        action = {"update": {"_id": payload["chunk_id"], "retry_on_conflict": 3}}
        script = {"source": KEEP_FEATURES_SCRIPT, "lang": "painless", "params": {"doc": source, "field": SPARSE_FIELD}}
        body = {"script": script, "upsert": source}
    return _ndjson(action) + _ndjson(body)


def snapshot_body(index: str, alias: str) -> dict[str, Any]:
    """The body of a snapshot of ``index`` alone (no cluster state), labelled with its alias."""
    return {
        "indices": index,
        "include_global_state": False,
        "metadata": {"alias": alias, "mapping_version": MAPPING_VERSION},
    }


def alias_actions(alias: str, index: str, previous: Sequence[str]) -> list[dict[str, Any]]:
    """``_aliases`` actions moving ``alias`` from ``previous`` to ``index`` in one step."""
    removes = [{"remove": {"index": old, "alias": alias}} for old in previous]
    return [*removes, {"add": {"index": index, "alias": alias}}]


def sparse_features(vector: SparseVector) -> dict[str, float]:
    """Term id (as a string) -> weight; zero weights dropped (rank_features takes only positive
    values); repeated ids summed (``merge_sparse``, as for Qdrant)."""
    for term, weight in zip(vector.indices, vector.values, strict=True):
        if weight < 0 or not math.isfinite(weight):
            raise ValueError(f"SPLADE weight of term {term} is {weight}; OpenSearch rank_features needs >= 0")
    merged = merge_sparse(vector)
    return {str(term): float(weight) for term, weight in zip(merged.indices, merged.values, strict=True) if weight > 0}


def _match(text: str, fields: list[str], boost: float) -> dict[str, Any]:
    match: dict[str, Any] = {"query": text, "fields": fields, "type": "cross_fields", "operator": "or"}
    if boost != 1.0:
        match["boost"] = boost
    return {"multi_match": match}


def _search_body(bool_query: dict[str, Any], top_k: int) -> dict[str, Any]:
    # No total hit count: lets Lucene skip non-competitive documents (block-max WAND).
    return {"size": top_k, "track_total_hits": False, "_source": [PAYLOAD_FIELD], "query": {"bool": bool_query}}


def _ndjson(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"
