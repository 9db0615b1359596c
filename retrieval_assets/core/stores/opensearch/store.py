"""OpenSearch store: BM25 (``LexicalStore``) and SPLADE (``SparseStore``) in one versioned index.

The index layout is ``mapping``'s, the request bodies ``requests``', the filter clauses
``filters``'. Builds: the index is created with ``refresh_interval: -1`` and no replicas; bulk
requests go in batches (count and bytes), retried with exponential backoff on 429, 5xx and
connection errors, and per-document 429 rejections are resent; any other per-document failure
raises ``BulkIndexError`` naming each document. ``finalize`` restores refresh and replicas and
refreshes. ``promote`` points the alias at this index in one atomic ``_aliases`` call;
``snapshot`` writes it to the configured snapshot repository (waiting for completion with its own
long request timeout, under the retry policy). Alias changes are retried too.

SPLADE queries send at most ``MAX_SPARSE_QUERY_TERMS`` terms (the clause limit); the retriever
records what was cut in the result's diagnostics. Sparse search on a lexical-only index
(``sparse=False``) is an error.

The client comes from ``connection.connect``.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError, TransportError

from retrieval_assets.core.models import SparseVector, StoreHit
from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    TAGS_FIELD,
    FieldType,
    LexicalStore,
    Payload,
    SparseStore,
    Stemmer,
    check_top_k,
    validate_field_types,
    validate_payloads,
)
from retrieval_assets.core.stores.filters import MetadataFilter
from retrieval_assets.core.stores.opensearch import requests
from retrieval_assets.core.stores.opensearch.connection import transient_wait
from retrieval_assets.core.stores.opensearch.filters import filter_clauses
from retrieval_assets.core.stores.opensearch.mapping import (
    BACKEND,
    MAPPING_VERSION,
    PAYLOAD_FIELD,
    document_source,
    index_body,
)
from retrieval_assets.core.stores.opensearch.requests import MAX_SPARSE_QUERY_TERMS
from retrieval_assets.core.stores.remote import RetryPolicy, new_version

logger = logging.getLogger(__name__)
T = TypeVar("T")

_INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_PAGE_SIZE = 5_000
# How long a snapshot may take (the request waits for completion; the client's default is 30 s).
SNAPSHOT_TIMEOUT_S = 3600.0


class BulkIndexError(RuntimeError):
    """Documents the cluster refused; ``failures`` holds (chunk_id, status, error) for each."""

    def __init__(self, index: str, failures: list[tuple[str, int, str]]):
        self.failures = failures
        shown = "; ".join(f"{chunk_id}: {status} {error}" for chunk_id, status, error in failures[:20])
        more = f" (and {len(failures) - 20} more)" if len(failures) > 20 else ""
        super().__init__(f"{len(failures)} document(s) failed to index into {index}: {shown}{more}")


class OpenSearchStore(LexicalStore, SparseStore):
    """BM25 and SPLADE search with filters in one OpenSearch index, reached through an alias."""

    backend = BACKEND
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
        stemmer: Stemmer = "english",
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
        ``content`` alone, the tantivy store's default. ``stemmer`` as the tantivy store's.
        ``replicas`` and ``refresh_interval`` are applied by ``finalize``. ``sparse=False`` makes a
        lexical-only index (no SPLADE features, and plain writes for ``add``).
        """
        if not (math.isfinite(title_boost) and title_boost >= 0):
            raise ValueError(f"title_boost must be a finite number >= 0, got {title_boost}")
        name = f"{alias}-{version or new_version()}"
        for label, value in (("alias", alias), ("index name", name)):
            if not _INDEX_NAME.match(value) or len(value) > 255:
                raise ValueError(f"{label} {value!r}: use lowercase letters, digits, '-', '_' and '.'")
        types = validate_field_types(field_types)
        body = index_body(alias, types, title_boost=title_boost, shards=shards, sparse=sparse, stemmer=stemmer)
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
        keep_features = sparse is None and self.sparse
        lines: list[tuple[str, str]] = []
        for i, payload in enumerate(payloads):
            source = document_source(payload, self.field_types, self._names)
            vector = None if sparse is None else sparse[i]
            line = requests.bulk_lines(payload, source, vector, keep_features=keep_features)
            lines.append((payload["chunk_id"], line))
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
        body = {"actions": requests.alias_actions(self.alias, self.index, previous)}
        # Retried on 429/5xx: the actions name the alias state read above, applied atomically.
        self._call(lambda: self._client.indices.update_aliases(body=body), "update aliases")
        return previous

    def snapshot(self, name: str | None = None) -> str:
        """Snapshot this index into the configured repository and wait for it; returns its name."""
        if not self.snapshot_repository:
            raise ValueError("no snapshot repository configured (pass snapshot_repository=...)")
        snapshot = name or f"{self.index}-{new_version()}"
        body = requests.snapshot_body(self.index, self.alias)
        create = partial(
            self._client.snapshot.create,
            repository=self.snapshot_repository,
            snapshot=snapshot,
            body=body,
            wait_for_completion=True,
            request_timeout=self.snapshot_timeout_s,
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

    def count_tenants(self, tenants: Collection[str]) -> int:
        scope = self._filter_clauses([MetadataFilter(field="tenant_id", any_of=sorted(tenants))])
        body = {"query": {"bool": {"filter": scope}}}
        return int(self._call(lambda: self._client.count(index=self.index, body=body), "count")["count"])

    def chunk_ids(self) -> set[str]:
        """Every chunk id, paged with ``search_after`` on the keyword's doc values."""
        found: set[str] = set()
        after: list[Any] | None = None
        while True:
            body = requests.chunk_ids_page(_PAGE_SIZE, after)
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

    def search_sparse(self, vector: SparseVector, top_k: int, filters: Sequence[MetadataFilter] = ()) -> list[StoreHit]:
        """Chunks by SPLADE dot product with ``vector``, best first; at most ``max_query_terms``
        of the query's heaviest terms are sent."""
        check_top_k(top_k)
        body = self.sparse_query(vector, top_k, filters)
        return [] if body is None else [_hit(hit) for hit in self._search(body)]

    def fetch_documents(self, doc_ids: Sequence[str], filters: Sequence[MetadataFilter] = ()) -> list[StoreHit]:
        """Each document's first chunk (lowest ``#ordinal``) passing ``filters``, in ``doc_ids``
        order, score 0.0: one ``collapse`` on doc_id does the choosing in the cluster."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []
        body = requests.first_chunks_query(wanted, self._filter_clauses(filters))
        first = {hit.doc_id: hit for hit in map(_hit, self._search(body))}
        return [StoreHit(first[d].chunk_id, 0.0, first[d].payload) for d in wanted if d in first]

    # -- request bodies ----------------------------------------------------------------------

    def text_query(
        self,
        query: str,
        top_k: int,
        filters: Sequence[MetadataFilter] = (),
        expansion_terms: Mapping[str, float] | None = None,
        tag_terms: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """The ``_search`` body of ``search_text``; None when there is nothing to match."""
        return requests.text_query(
            query,
            top_k,
            self._filter_clauses(filters),
            title_boost=self.title_boost,
            expansion_terms=expansion_terms,
            tags_field=self._names[TAGS_FIELD] if self._has_tags else None,
            tag_terms=tag_terms,
        )

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
        return requests.sparse_query(
            vector, top_k, self._filter_clauses(filters), max_terms=self.max_query_terms, index=self.index
        )

    # -- internals ---------------------------------------------------------------------------

    def _filter_clauses(self, filters: Sequence[MetadataFilter]) -> list[dict[str, Any]]:
        return filter_clauses(filters, self.field_types, self._names, self.index)

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
            logger.warning(
                "bulk into %s: %d document(s) rejected (429); resending in %.1f s", self.index, len(rejected), delay
            )
            self.retry.sleep(delay)
            pending = rejected

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call(lambda: self._client.search(index=self.index, body=body), "search")["hits"]["hits"]

    def _call(self, call: Callable[[], T], what: str) -> T:
        return self.retry.run(call, transient_wait, f"OpenSearch {what} on {self.index}")


def _error_type(exc: TransportError) -> str | None:
    info = exc.info if isinstance(exc.info, Mapping) else {}
    error = info.get("error")
    return error.get("type") if isinstance(error, Mapping) else None


def _hit(hit: dict[str, Any]) -> StoreHit:
    payload = hit["_source"][PAYLOAD_FIELD]
    return StoreHit(chunk_id=payload["chunk_id"], score=float(hit.get("_score") or 0.0), payload=payload)


def _describe_error(error: Any) -> str:
    if isinstance(error, Mapping):
        return f"{error.get('type')}: {error.get('reason')}"
    return str(error)
