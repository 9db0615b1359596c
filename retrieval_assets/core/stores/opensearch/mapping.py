"""OpenSearch index layout: the mapping and settings of a new index, and the document of a chunk.

Layout (``MAPPING_VERSION``, recorded with the field types in the mapping's ``_meta``):
- ``content`` (title + text, as in the tantivy store) and ``title``: ``text`` with the built-in
  ``english`` analyzer (standard tokenizer, possessives, lowercase, Lucene's English stop words,
  Porter stemming) and a named BM25 similarity with Lucene's k1=1.2, b=0.75 written out;
- ``chunk_id``, ``doc_id``, ``tenant_id``, ``section``: ``keyword``; ``chunk_ordinal`` (the
  ``#n`` of the chunk id) picks a document's first chunk in ``fetch_documents``;
- metadata filter fields from the catalog's ``field_types`` under sanitised names (``m_<field>``,
  the tantivy store's names, since catalog keys such as ``relations.requires`` would become
  object paths): keyword -> ``keyword`` (lists are multi-valued), integer -> ``long``,
  float -> ``double``, bool -> ``boolean``;
- ``splade_features``: ``rank_features``. Feature names are the SPLADE term ids as strings
  ("2023"), not vocabulary tokens: a feature name must not contain a dot (the ``rank_feature``
  query splits ``field.feature`` at the last dot) and BERT tokens include ".", "##s" and
  "[unused0]"; ids are short, always valid, and the encoder's id space is the contract anyway.
  OpenSearch keeps 9 significant bits of each feature value, so sparse scores are the SPLADE dot
  product to about 0.4 %;
- ``payload``: the whole payload, stored and not indexed (``enabled: false``), returned on hits.
``dynamic`` is ``false``: other payload keys never grow the mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    FieldType,
    Payload,
    Stemmer,
    index_values,
    metadata_field_names,
)

BACKEND = "opensearch"
MAPPING_VERSION = 1
CONTENT_FIELD = "content"
SPARSE_FIELD = "splade_features"
PAYLOAD_FIELD = "payload"
ORDINAL_FIELD = "chunk_ordinal"
SIMILARITY = "bm25_lucene"
# Lowercased words without English stop words, unstemmed: the ``english`` analyzer less its stemmer.
UNSTEMMED_ANALYZER = "english_unstemmed"
_OPENSEARCH_TYPES = {"keyword": "keyword", "integer": "long", "float": "double", "bool": "boolean"}


def index_body(
    alias: str,
    field_types: Mapping[str, FieldType],
    *,
    title_boost: float,
    shards: int,
    sparse: bool = True,
    stemmer: Stemmer = "english",
) -> dict[str, Any]:
    """Settings and mappings of a new index, ready for a batch build (no refresh, no replicas);
    ``stemmer`` "none" analyses text as ``english`` does, without stemming."""
    schema_names = metadata_field_names(dict(field_types))
    analyzer = "english" if stemmer == "english" else UNSTEMMED_ANALYZER
    text = {"type": "text", "analyzer": analyzer, "similarity": SIMILARITY}
    properties: dict[str, Any] = {
        CONTENT_FIELD: text,
        "title": text,
        **{field: {"type": "keyword"} for field in KEYWORD_PAYLOAD_FIELDS},
        ORDINAL_FIELD: {"type": "integer"},
        **({SPARSE_FIELD: {"type": "rank_features"}} if sparse else {}),
        PAYLOAD_FIELD: {"type": "object", "enabled": False},
    }
    for field, kind in field_types.items():
        properties[schema_names[field]] = {"type": _OPENSEARCH_TYPES[kind]}
    return {
        "settings": {
            "index": {
                "number_of_shards": shards,
                "number_of_replicas": 0,
                "refresh_interval": "-1",
                "similarity": {SIMILARITY: {"type": "BM25", "k1": 1.2, "b": 0.75}},
                **(
                    {"analysis": {"analyzer": {UNSTEMMED_ANALYZER: {"type": "standard", "stopwords": "_english_"}}}}
                    if analyzer == UNSTEMMED_ANALYZER
                    else {}
                ),
            }
        },
        "mappings": {
            "dynamic": "false",
            "_meta": {
                "backend": BACKEND,
                "mapping_version": MAPPING_VERSION,
                "alias": alias,
                "sparse": sparse,
                "field_types": dict(field_types),
                "schema_names": schema_names,
                "title_boost": title_boost,
                "stemmer": stemmer,
            },
            "properties": properties,
        },
    }


def document_source(
    payload: Payload, field_types: Mapping[str, FieldType], names: Mapping[str, str]
) -> dict[str, Any]:
    """The indexed document of a chunk (without SPLADE features): identifiers, text, ordinal,
    the metadata fields under their ``names`` (values not of the field's type left out), payload."""
    title, text = str(payload["title"]), str(payload["text"])
    source: dict[str, Any] = {field: str(payload[field]) for field in KEYWORD_PAYLOAD_FIELDS}
    source.update({CONTENT_FIELD: f"{title}\n{text}", "title": title, PAYLOAD_FIELD: payload})
    ordinal = _chunk_ordinal(payload["chunk_id"])
    if ordinal is not None:
        source[ORDINAL_FIELD] = ordinal
    for field, kind in field_types.items():
        values = index_values(payload.get(field), kind)
        if values:
            source[names[field]] = values if len(values) > 1 else values[0]
    return source


def _chunk_ordinal(chunk_id: str) -> int | None:
    _, sep, ordinal = chunk_id.rpartition("#")
    return int(ordinal) if sep and ordinal.isdigit() and int(ordinal) < 2**31 else None
