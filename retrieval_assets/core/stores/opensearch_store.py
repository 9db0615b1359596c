"""OpenSearch store: BM25 (``LexicalStore``) and SPLADE (``SparseStore``) in one versioned index.

Index layout (``MAPPING_VERSION``, recorded with the field types in the mapping's ``_meta``):
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

Queries put every metadata filter (tenant included) in ``filter`` context: cached, unscored,
applied while collecting the top k. Text is matched by ``multi_match`` (the query's words, then
one clause per expansion word weighted by its weight); ``tags`` values add ``TAG_SCORE`` each as
a ``constant_score`` ``should`` next to the text ``must``, so they only reorder what the words
match, like the tantivy store. SPLADE is a ``bool`` of ``rank_feature`` clauses with the
``linear`` function boosted by the query weight, which is exactly the dot product.

Builds: the index is created with ``refresh_interval: -1`` and no replicas; bulk requests go in
batches (count and bytes), retried with exponential backoff on 429, 5xx and connection errors,
and per-document 429 rejections are resent; any other per-document failure raises
``BulkIndexError`` naming each document. ``finalize`` restores refresh and replicas and
refreshes. ``promote`` points the alias at this index in one atomic ``_aliases`` call;
``snapshot`` writes it to the configured snapshot repository (waiting for completion with its own
long request timeout, under the retry policy). Alias changes are retried too.

SPLADE queries send at most ``MAX_SPARSE_QUERY_TERMS`` (1000) terms, the heaviest, so a query
stays under ``indices.query.bool.max_clause_count`` (default 1024); the retriever records what was
cut in the result's diagnostics. Sparse search on a lexical-only index (``sparse=False``) is an error.

Credentials come from ``OpenSearchSettings`` (the Dagster layer fills it from ``EnvVar``); they
are ``SecretStr``, so no repr, log line or error message shows them.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Self, TypeVar
from urllib.parse import urlparse

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import NotFoundError, SSLError, TransportError
from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

from retrieval_assets.core.stores.filters import FilterError, MetadataFilter
from retrieval_assets.core.models import SparseVector, StoreHit
from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    TAG_SCORE,
    TAGS_FIELD,
    FieldType,
    LexicalStore,
    Payload,
    SparseStore,
    check_top_k,
    coerce_filter_values,
    index_values,
    metadata_field_names,
    validate_field_types,
    validate_payloads,
)
from retrieval_assets.core.stores.remote import RetryPolicy, merge_sparse, new_version, strongest_terms

# Shared with the tantivy store so both lexical backends name, index and score fields alike.

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAPPING_VERSION = 1
CONTENT_FIELD = "content"
SPARSE_FIELD = "splade_features"
PAYLOAD_FIELD = "payload"
ORDINAL_FIELD = "chunk_ordinal"
SIMILARITY = "bm25_lucene"
_OPENSEARCH_TYPES = {"keyword": "keyword", "integer": "long", "float": "double", "bool": "boolean"}
# Replaces the stored document but keeps its SPLADE features: a lexical write must not drop them.
KEEP_FEATURES_SCRIPT = (
    "def kept = ctx._source.get(params.field); ctx._source.clear(); ctx._source.putAll(params.doc); "
    "if (kept != null) { ctx._source.put(params.field, kept); }"
)
_INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_PAGE_SIZE = 5_000
# SPLADE query terms sent to OpenSearch: each is one ``rank_feature`` clause, and a query may
# hold at most ``indices.query.bool.max_clause_count`` clauses (1024 by default, counted over
# the whole query). 1000 leaves room for the filter clauses; the lightest terms are dropped.
MAX_SPARSE_QUERY_TERMS = 1000
# How long a snapshot may take (the request waits for completion; the client's default is 30 s).
SNAPSHOT_TIMEOUT_S = 3600.0


class OpenSearchSettings(BaseModel):
    """How to reach the cluster. Secrets are ``SecretStr``: masked in repr, logs and errors."""

    model_config = ConfigDict(frozen=True)

    url: str
    username: str | None = None
    password: SecretStr | None = None
    api_key: SecretStr | None = None
    # TLS: verify against the system store, or ``ca_certs`` (a PEM file) when given.
    verify_certs: bool = True
    ca_certs: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    timeout_s: float = 30.0

    @model_validator(mode="after")
    def _check(self) -> Self:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("OpenSearch url must look like https://host:9200")
        if parsed.username or parsed.password:
            raise ValueError("put OpenSearch credentials in username/password, not in the url")
        if (self.username is None) != (self.password is None):
            raise ValueError("OpenSearch basic auth needs both username and password")
        if self.username is not None and self.api_key is not None:
            raise ValueError("use either basic auth or an API key for OpenSearch, not both")
        return self


def connect(settings: OpenSearchSettings, **client_options: Any) -> OpenSearch:
    """A client for ``settings``. Retries are the stores' (with backoff), so the transport's own
    immediate retries are off. ``client_options`` go to ``OpenSearch`` (e.g. ``connection_class``)."""
    headers = {}
    if settings.api_key is not None:
        # OpenSearch 3.7+ API keys: the token goes as is, unlike Elasticsearch's id:key pairs.
        headers["authorization"] = f"ApiKey {settings.api_key.get_secret_value()}"
    auth = None
    if settings.username is not None and settings.password is not None:
        auth = (settings.username, settings.password.get_secret_value())
    options: dict[str, Any] = {
        "hosts": [settings.url],
        "http_auth": auth,
        "headers": headers,
        "verify_certs": settings.verify_certs,
        "ca_certs": settings.ca_certs,
        "client_cert": settings.client_cert,
        "client_key": settings.client_key,
        "timeout": settings.timeout_s,
        "max_retries": 0,
        "retry_on_status": (),
        "http_compress": True,
    }
    options.update(client_options)
    return OpenSearch(**options)


class BulkIndexError(RuntimeError):
    """Documents the cluster refused; ``failures`` holds (chunk_id, status, error) for each."""

    def __init__(self, index: str, failures: list[tuple[str, int, str]]):
        self.failures = failures
        shown = "; ".join(f"{chunk_id}: {status} {error}" for chunk_id, status, error in failures[:20])
        more = f" (and {len(failures) - 20} more)" if len(failures) > 20 else ""
        super().__init__(f"{len(failures)} document(s) failed to index into {index}: {shown}{more}")


def transient_wait(exc: Exception) -> float | None:
    """0 (retry after the policy's backoff) for 429, 5xx and connection errors; None otherwise."""
    if isinstance(exc, SSLError):
        return None  # a certificate problem does not go away by waiting
    if isinstance(exc, OpenSearchConnectionError):
        return 0.0
    status = exc.status_code if isinstance(exc, TransportError) else None
    return 0.0 if isinstance(status, int) and (status == 429 or status >= 500) else None


def index_body(
    alias: str, field_types: Mapping[str, FieldType], *, title_boost: float, shards: int, sparse: bool = True
) -> dict[str, Any]:
    """Settings and mappings of a new index, ready for a batch build (no refresh, no replicas)."""
    schema_names = metadata_field_names(dict(field_types))
    text = {"type": "text", "analyzer": "english", "similarity": SIMILARITY}
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
            }
        },
        "mappings": {
            "dynamic": "false",
            "_meta": {
                "backend": OpenSearchStore.backend,
                "mapping_version": MAPPING_VERSION,
                "alias": alias,
                "sparse": sparse,
                "field_types": dict(field_types),
                "schema_names": schema_names,
                "title_boost": title_boost,
            },
            "properties": properties,
        },
    }


class OpenSearchStore(LexicalStore, SparseStore):
    """BM25 and SPLADE search with filters in one OpenSearch index, reached through an alias."""

    backend = "opensearch"
    batch_size = 500
    max_batch_bytes = 8 * 1024 * 1024
    max_query_terms = MAX_SPARSE_QUERY_TERMS
    snapshot_timeout_s = SNAPSHOT_TIMEOUT_S

    def __init__(
        self,
        client: OpenSearch,
        index: str,
        alias: str,
        meta: Mapping[str, Any],
        *,
        retry: RetryPolicy | None = None,
        snapshot_repository: str | None = None,
        replicas: int = 1,
        refresh_interval: str = "1s",
        building: bool = False,
    ):
        """Use ``create`` or ``open``."""
        self._client = client
        self.index = index
        self.alias = alias
        self.field_types: dict[str, FieldType] = dict(meta["field_types"])
        self.title_boost: float = float(meta["title_boost"])
        self.sparse: bool = bool(meta["sparse"])
        self._names: dict[str, str] = {**{f: f for f in KEYWORD_PAYLOAD_FIELDS}, **meta["schema_names"]}
        self._has_tags = self.field_types.get(TAGS_FIELD) == "keyword"
        self.retry = retry or RetryPolicy()
        self.snapshot_repository = snapshot_repository
        self.replicas = replicas
        self.refresh_interval = refresh_interval
        self._building = building
        self._dirty = False
        # What the last sparse query left out to stay under the clause limit ({} when nothing):
        # sparse_terms, sparse_terms_sent, sparse_terms_dropped, sparse_weight_dropped.

    def __repr__(self) -> str:
        return f"{type(self).__name__}(index={self.index!r}, alias={self.alias!r})"

    @classmethod
    def create(
        cls,
        client: OpenSearch,
        alias: str,
        *,
        field_types: dict[str, FieldType] | None = None,
        version: str | None = None,
        title_boost: float = 0.0,
        sparse: bool = True,
        shards: int = 1,
        replicas: int = 1,
        refresh_interval: str = "1s",
        retry: RetryPolicy | None = None,
        snapshot_repository: str | None = None,
    ) -> OpenSearchStore:
        """A new index ``{alias}-{version}`` set up for a batch build; ``promote`` makes ``alias``
        point at it. Only fields in ``field_types`` (and the identifiers) can be filtered on.

        ``title_boost`` > 0 adds ``title^boost`` to the ``multi_match`` (``cross_fields``, so a
        word's statistics are blended across content and title, BM25F-style); 0 searches
        ``content`` alone, the tantivy store's default. ``replicas`` and ``refresh_interval``
        are applied by ``finalize``. ``sparse=False`` makes a lexical-only index (no SPLADE
        features, and plain writes for ``add``).
        """
        if not (math.isfinite(title_boost) and title_boost >= 0):
            raise ValueError(f"title_boost must be a finite number >= 0, got {title_boost}")
        name = f"{alias}-{version or new_version()}"
        for label, value in (("alias", alias), ("index name", name)):
            if not _INDEX_NAME.match(value) or len(value) > 255:
                raise ValueError(f"{label} {value!r}: use lowercase letters, digits, '-', '_' and '.'")
        types = validate_field_types(field_types)
        body = index_body(alias, types, title_boost=title_boost, shards=shards, sparse=sparse)
        store = cls(
            client,
            name,
            alias,
            body["mappings"]["_meta"],
            retry=retry,
            snapshot_repository=snapshot_repository,
            replicas=replicas,
            refresh_interval=refresh_interval,
            building=True,
        )
        store._call(lambda: client.indices.create(index=name, body=body), "create index")
        return store

    @classmethod
    def open(
        cls,
        client: OpenSearch,
        name: str,
        *,
        retry: RetryPolicy | None = None,
        snapshot_repository: str | None = None,
    ) -> OpenSearchStore:
        """The index behind alias ``name`` (or the index ``name`` itself), checked to carry this
        code's mapping version."""
        policy = retry or RetryPolicy()
        try:
            targets = sorted(policy.run(lambda: client.indices.get_alias(name=name), transient_wait, "get alias"))
        except NotFoundError:
            targets = []
        if len(targets) > 1:
            raise ValueError(f"alias {name!r} points at several indexes {targets}; expected one")
        index = targets[0] if targets else name
        try:
            mapping = policy.run(lambda: client.indices.get_mapping(index=index), transient_wait, "get mapping")
        except NotFoundError:
            raise LookupError(f"no OpenSearch index or alias named {name!r}") from None
        meta = next(iter(mapping.values()))["mappings"].get("_meta", {})
        if meta.get("backend") != cls.backend or meta.get("mapping_version") != MAPPING_VERSION:
            raise ValueError(
                f"OpenSearch index {index} has mapping version {meta.get('mapping_version')}, this code "
                f"reads {MAPPING_VERSION}; rebuild the index"
            )
        alias = name if targets else meta.get("alias", index)
        return cls(client, index, alias, meta, retry=policy, snapshot_repository=snapshot_repository)

    # -- writes ------------------------------------------------------------------------------

    def upsert(self, payloads: Sequence[Payload], sparse: Sequence[SparseVector] | None = None) -> None:
        """Index chunks (text, filters, payload) with their SPLADE vectors; a chunk_id already
        present is replaced. Without ``sparse``, a SPLADE index keeps the existing features (a
        scripted update: in a build, write both at once instead). Searchable after ``finalize``."""
        validate_payloads(payloads)
        if sparse is not None and not self.sparse:
            raise ValueError(f"OpenSearch index {self.index} was created without SPLADE features (sparse=False)")
        if sparse is not None and len(sparse) != len(payloads):
            raise ValueError(f"got {len(sparse)} sparse vectors for {len(payloads)} payloads")
        lines: list[tuple[str, str]] = []
        for i, payload in enumerate(payloads):
            source = self._source(payload)
            if sparse is not None or not self.sparse:
                if sparse is not None:
                    source[SPARSE_FIELD] = _features(sparse[i])
                action: dict[str, Any] = {"index": {"_id": payload["chunk_id"]}}
                body: dict[str, Any] = source
            else:
                action = {"update": {"_id": payload["chunk_id"], "retry_on_conflict": 3}}
                script = {"source": KEEP_FEATURES_SCRIPT, "lang": "painless",
                          "params": {"doc": source, "field": SPARSE_FIELD}}
                body = {"script": script, "upsert": source}
            lines.append((payload["chunk_id"], _ndjson(action) + _ndjson(body)))
        for batch in self._batches(lines):
            self._bulk(batch)
        self._dirty = True

    def add(self, payloads: Sequence[Payload]) -> None:
        self.upsert(payloads)

    def upsert_sparse(self, payloads: Sequence[Payload], vectors: Sequence[SparseVector]) -> None:
        self.upsert(payloads, sparse=vectors)

    def finalize(self) -> None:
        """End a build (restore refresh interval and replicas) and make all writes searchable."""
        if self._building:
            settings = {"index": {"refresh_interval": self.refresh_interval, "number_of_replicas": self.replicas}}
            self._call(lambda: self._client.indices.put_settings(index=self.index, body=settings), "put settings")
            self._building = False
        self._call(lambda: self._client.indices.refresh(index=self.index), "refresh")
        self._dirty = False

    def close(self) -> None:
        """Finalize pending writes; the client belongs to the caller."""
        if self._dirty or self._building:
            self.finalize()

    # -- lifecycle ---------------------------------------------------------------------------

    def promote(self) -> list[str]:
        """Point ``alias`` at this index, atomically (one ``_aliases`` call removes it from the
        indexes it named and adds it here). Returns those previous indexes, for the caller to
        keep (rollback) or delete."""
        try:
            current = sorted(self._call(lambda: self._client.indices.get_alias(name=self.alias), "get alias"))
        except NotFoundError:
            current = []
        previous = [index for index in current if index != self.index]
        body = {"actions": alias_actions(self.alias, self.index, previous)}
        # Retried on 429/5xx: the actions name the alias state read above, applied atomically.
        self._call(lambda: self._client.indices.update_aliases(body=body), "update aliases")
        return previous

    def snapshot(self, name: str | None = None) -> str:
        """Snapshot this index into the configured repository and wait for it; returns its name."""
        if not self.snapshot_repository:
            raise ValueError("no snapshot repository configured (pass snapshot_repository=...)")
        snapshot = name or f"{self.index}-{new_version()}"
        body = {
            "indices": self.index,
            "include_global_state": False,
            "metadata": {"alias": self.alias, "mapping_version": MAPPING_VERSION},
        }
        create = partial(
            self._client.snapshot.create, repository=self.snapshot_repository, snapshot=snapshot, body=body,
            wait_for_completion=True, request_timeout=self.snapshot_timeout_s,
        )
        attempts = itertools.count()

        def attempt() -> Any:
            retried = next(attempts) > 0
            try:
                return create()
            except TransportError as exc:
                # A retried request finding its own snapshot: an earlier attempt started it.
                if retried and _error_type(exc) == "invalid_snapshot_name_exception":
                    return self._wait_for_snapshot(snapshot)
                raise

        response = self._call(attempt, f"snapshot {snapshot}")
        state = response.get("snapshot", {}).get("state")
        if state != "SUCCESS":
            raise RuntimeError(f"snapshot {snapshot} of {self.index} ended in state {state!r}")
        return snapshot

    def _wait_for_snapshot(self, snapshot: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.snapshot_timeout_s
        while True:
            found = self._call(
                lambda: self._client.snapshot.get(repository=self.snapshot_repository, snapshot=snapshot),
                f"get snapshot {snapshot}",
            )["snapshots"][0]
            if found.get("state") != "IN_PROGRESS" or time.monotonic() >= deadline:
                return {"snapshot": found}
            self.retry.sleep(self.retry.initial_backoff_s or 1.0)

    # -- reads -------------------------------------------------------------------------------

    def count(self) -> int:
        return int(self._call(lambda: self._client.count(index=self.index), "count")["count"])

    def chunk_ids(self) -> set[str]:
        """Every chunk id, paged with ``search_after`` on the keyword's doc values."""
        found: set[str] = set()
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": _PAGE_SIZE, "_source": False, "track_total_hits": False, "sort": [{"chunk_id": "asc"}],
            }
            if after is not None:
                body["search_after"] = after
            hits = self._search(body)
            found.update(hit["sort"][0] for hit in hits)
            if len(hits) < _PAGE_SIZE:
                return found
            after = hits[-1]["sort"]

    def search_text(
        self,
        query: str,
        top_k: int,
        filters: Sequence[MetadataFilter] = (),
        *,
        expansion_terms: Mapping[str, float] | None = None,
        tag_terms: Sequence[str] = (),
    ) -> list[StoreHit]:
        """BM25 top-k chunks for ``query``, best first; see ``LexicalStore.search_text``.

        Unlike the tantivy store, expansion words are analysed by the server, so two expansion
        words with the same stem add both their weights rather than the larger one.
        """
        check_top_k(top_k)
        body = self.text_query(query, top_k, filters, expansion_terms, tag_terms)
        return [] if body is None else [_hit(hit) for hit in self._search(body)]

    def search_sparse(
        self, vector: SparseVector, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]:
        """Chunks by SPLADE dot product with ``vector``, best first; at most ``max_query_terms``
        of the query's heaviest terms are sent."""
        check_top_k(top_k)
        body = self.sparse_query(vector, top_k, filters)
        return [] if body is None else [_hit(hit) for hit in self._search(body)]

    def fetch_documents(
        self, doc_ids: Sequence[str], filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]:
        """Each document's first chunk (lowest ``#ordinal``) passing ``filters``, in ``doc_ids``
        order, score 0.0: one ``collapse`` on doc_id does the choosing in the cluster."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []
        body = {
            "size": len(wanted),
            "track_total_hits": False,
            "_source": [PAYLOAD_FIELD],
            "query": {"bool": {"filter": [{"terms": {"doc_id": wanted}}, *self._filter_clauses(filters)]}},
            "collapse": {"field": "doc_id"},
            "sort": [{ORDINAL_FIELD: {"order": "asc", "missing": "_last"}}, {"chunk_id": "asc"}],
        }
        first = {hit.doc_id: hit for hit in map(_hit, self._search(body))}
        return [StoreHit(first[d].chunk_id, 0.0, first[d].payload) for d in wanted if d in first]

    # -- request bodies ----------------------------------------------------------------------

    def text_query(self, query: str, top_k: int, filters: Sequence[MetadataFilter] = (),
                   expansion_terms: Mapping[str, float] | None = None, tag_terms: Sequence[str] = ()
                   ) -> dict[str, Any] | None:
        """The ``_search`` body of ``search_text``; None when there is nothing to match."""
        fields = [CONTENT_FIELD] + ([f"title^{self.title_boost:g}"] if self.title_boost > 0 else [])
        clauses = [self._match(query, fields, 1.0)] if query.strip() else []
        for word, weight in (expansion_terms or {}).items():
            if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
                raise ValueError(f"expansion term {word!r}: weight must be in [0, 1], got {weight}")
            if weight > 0.0 and word.strip():
                clauses.append(self._match(word, fields, weight))
        if not clauses:
            return None
        bool_query: dict[str, Any] = {
            "must": [{"bool": {"should": clauses, "minimum_should_match": 1}}],
            "filter": self._filter_clauses(filters),
        }
        if self._has_tags and tag_terms:
            bool_query["should"] = [
                {"constant_score": {"filter": {"term": {self._names[TAGS_FIELD]: tag}}, "boost": TAG_SCORE}}
                for tag in dict.fromkeys(tag_terms)
            ]
        return _search_body(bool_query, top_k)

    def sparse_query(
        self, vector: SparseVector, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> dict[str, Any] | None:
        """The ``_search`` body of ``search_sparse``; None for a vector without positive weights.
        Only the ``max_query_terms`` heaviest terms become clauses (the clause limit)."""
        if not self.sparse:
            raise ValueError(
                f"OpenSearch index {self.index} was created without SPLADE features (sparse=False): "
                "it serves BM25 only; search SPLADE on the Qdrant collection of this version"
            )
        features = _features(vector)
        if not features:
            return None
        # The retriever already sends at most max_query_terms; this keeps any other caller under the limit.
        positive = SparseVector(indices=[int(term) for term in features], values=list(features.values()))
        capped, cut = strongest_terms(positive, self.max_query_terms)
        if cut:
            logger.info("SPLADE query on %s cut to its heaviest terms (clause limit): %s", self.index, cut)
        clauses = [
            {"rank_feature": {"field": f"{SPARSE_FIELD}.{term}", "linear": {}, "boost": weight}}
            for term, weight in zip(capped.indices, capped.values, strict=True)
        ]
        bool_query = {"should": clauses, "minimum_should_match": 1, "filter": self._filter_clauses(filters)}
        return _search_body(bool_query, top_k)

    # -- internals ---------------------------------------------------------------------------

    @staticmethod
    def _match(text: str, fields: list[str], boost: float) -> dict[str, Any]:
        match: dict[str, Any] = {"query": text, "fields": fields, "type": "cross_fields", "operator": "or"}
        if boost != 1.0:
            match["boost"] = boost
        return {"multi_match": match}

    def _filter_clauses(self, filters: Sequence[MetadataFilter]) -> list[dict[str, Any]]:
        return [self._filter_clause(flt) for flt in filters]

    def _filter_clause(self, flt: MetadataFilter) -> dict[str, Any]:
        field_type = "keyword" if flt.field in KEYWORD_PAYLOAD_FIELDS else self.field_types.get(flt.field)
        if field_type is None:
            raise FilterError(
                f"{flt.field!r} is not a filter field of OpenSearch index {self.index}; declare it in "
                f"field_types at create (filterable: {sorted(self.field_types)})"
            )
        name = self._names[flt.field]
        if flt.any_of is not None:
            return {"terms": {name: coerce_filter_values(flt, field_type)}}
        if field_type not in ("integer", "float"):
            raise FilterError(f"range filter on {flt.field!r}, a {field_type} field")
        bounds: dict[str, float | int] = {}
        if flt.gte is not None:
            bounds["gte"] = math.ceil(flt.gte) if field_type == "integer" else flt.gte
        if flt.lte is not None:
            bounds["lte"] = math.floor(flt.lte) if field_type == "integer" else flt.lte
        return {"range": {name: bounds}}

    def _source(self, payload: Payload) -> dict[str, Any]:
        title, text = str(payload["title"]), str(payload["text"])
        source: dict[str, Any] = {field: str(payload[field]) for field in KEYWORD_PAYLOAD_FIELDS}
        source.update({CONTENT_FIELD: f"{title}\n{text}", "title": title, PAYLOAD_FIELD: payload})
        ordinal = _chunk_ordinal(payload["chunk_id"])
        if ordinal is not None:
            source[ORDINAL_FIELD] = ordinal
        for field, kind in self.field_types.items():
            values = index_values(payload.get(field), kind)
            if values:
                source[self._names[field]] = values if len(values) > 1 else values[0]
        return source

    def _batches(self, lines: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        """Consecutive groups of at most ``batch_size`` documents and ``max_batch_bytes``."""
        batches: list[list[tuple[str, str]]] = [[]]
        size = 0
        for item in lines:
            length = len(item[1].encode("utf-8"))
            if batches[-1] and (len(batches[-1]) >= self.batch_size or size + length > self.max_batch_bytes):
                batches.append([])
                size = 0
            batches[-1].append(item)
            size += length
        return [batch for batch in batches if batch]

    def _bulk(self, batch: list[tuple[str, str]]) -> None:
        """One bulk request; documents rejected with 429 are resent with backoff, any other
        per-document failure raises ``BulkIndexError`` listing them all."""
        pending = batch
        for attempt in itertools.count():
            body = "".join(lines for _, lines in pending)
            response = self._call(partial(self._client.bulk, index=self.index, body=body), "bulk")
            if not response.get("errors"):
                return
            rejected: list[tuple[str, str]] = []
            failures: list[tuple[str, int, str]] = []
            for item, entry in zip(pending, response["items"], strict=True):
                result = next(iter(entry.values()))
                status = int(result.get("status", 500))
                if 200 <= status < 300:
                    continue
                if status == 429 and attempt < self.retry.max_retries:
                    rejected.append(item)
                else:
                    failures.append((item[0], status, _describe_error(result.get("error"))))
            if failures:
                raise BulkIndexError(self.index, failures)
            if not rejected:
                return
            delay = self.retry.delay(attempt)
            logger.warning("bulk into %s: %d document(s) rejected (429); resending in %.1f s",
                           self.index, len(rejected), delay)
            self.retry.sleep(delay)
            pending = rejected

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call(lambda: self._client.search(index=self.index, body=body), "search")["hits"]["hits"]

    def _call(self, call: Callable[[], T], what: str) -> T:
        return self.retry.run(call, transient_wait, f"OpenSearch {what} on {self.index}")


def alias_actions(alias: str, index: str, previous: Sequence[str]) -> list[dict[str, Any]]:
    """``_aliases`` actions moving ``alias`` from ``previous`` to ``index`` in one step."""
    removes = [{"remove": {"index": old, "alias": alias}} for old in previous]
    return [*removes, {"add": {"index": index, "alias": alias}}]


def _search_body(bool_query: dict[str, Any], top_k: int) -> dict[str, Any]:
    # No total hit count: lets Lucene skip non-competitive documents (block-max WAND).
    return {"size": top_k, "track_total_hits": False, "_source": [PAYLOAD_FIELD], "query": {"bool": bool_query}}


def _features(vector: SparseVector) -> dict[str, float]:
    """Term id (as a string) -> weight; zero weights dropped (rank_features takes only positive
    values); repeated ids summed (``merge_sparse``, as for Qdrant)."""
    for term, weight in zip(vector.indices, vector.values, strict=True):
        if weight < 0 or not math.isfinite(weight):
            raise ValueError(f"SPLADE weight of term {term} is {weight}; OpenSearch rank_features needs >= 0")
    merged = merge_sparse(vector)
    return {str(term): float(weight) for term, weight in zip(merged.indices, merged.values, strict=True) if weight > 0}


def _error_type(exc: TransportError) -> str | None:
    info = exc.info if isinstance(exc.info, Mapping) else {}
    error = info.get("error")
    return error.get("type") if isinstance(error, Mapping) else None


def _hit(hit: dict[str, Any]) -> StoreHit:
    payload = hit["_source"][PAYLOAD_FIELD]
    return StoreHit(chunk_id=payload["chunk_id"], score=float(hit.get("_score") or 0.0), payload=payload)


def _chunk_ordinal(chunk_id: str) -> int | None:
    _, sep, ordinal = chunk_id.rpartition("#")
    return int(ordinal) if sep and ordinal.isdigit() and int(ordinal) < 2**31 else None


def _ndjson(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _describe_error(error: Any) -> str:
    if isinstance(error, Mapping):
        return f"{error.get('type')}: {error.get('reason')}"
    return str(error)
