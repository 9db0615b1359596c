"""The index versions on Qdrant and OpenSearch servers, when they are configured.

Each version gets its own collection / index, ``{alias}-{version}``, written by the build like
the embedded indexes and checked against the same chunk ids. Promotion snapshots the version (OpenSearch,
when a snapshot repository is configured), then moves the server aliases (atomically on each
server) before the promotion pointer, so clients that read the aliases
directly switch together with the query resource; the query resource itself addresses the
versioned names, so it serves exactly the version the pointer names. Qdrant serves dense and
SPLADE search, OpenSearch BM25 (and SPLADE when no Qdrant is configured).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from retrieval_assets.core.index.build import PointBatch
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.models import Strategy
from retrieval_assets.core.stores.base import FieldType, IndexStore, Stemmer
from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings
from retrieval_assets.core.stores.opensearch.connection import connect as connect_opensearch
from retrieval_assets.core.stores.opensearch.connection import transient_wait as opensearch_transient
from retrieval_assets.core.stores.opensearch.store import OpenSearchStore
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.core.stores.qdrant.connection import connect as connect_qdrant
from retrieval_assets.core.stores.qdrant.connection import transient_wait as qdrant_transient
from retrieval_assets.core.stores.qdrant.server import QdrantServerStore
from retrieval_assets.core.stores.remote import RetryPolicy


class ServerSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    qdrant: QdrantServerSettings | None = None
    opensearch: OpenSearchSettings | None = None
    # Alias clients use; versions are "{alias}-{version}".
    alias: str = "retrieval_chunks"
    # Replicas per OpenSearch shard after a build (0 on a single node, or the index stays yellow).
    opensearch_replicas: int = Field(1, ge=0)
    # An OpenSearch snapshot repository: each promoted version is snapshotted into it.
    snapshot_repository: str | None = None
    max_retries: int = Field(5, ge=0)
    initial_backoff_s: float = Field(0.5, ge=0.0)

    @property
    def configured(self) -> bool:
        return self.qdrant is not None or self.opensearch is not None


class ServerIndexes:
    """The configured servers' side of every index version."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.retry = RetryPolicy(max_retries=settings.max_retries, initial_backoff_s=settings.initial_backoff_s)

    @cached_property
    def _qdrant(self) -> Any:
        return connect_qdrant(self.settings.qdrant) if self.settings.qdrant else None

    @cached_property
    def _opensearch(self) -> Any:
        return connect_opensearch(self.settings.opensearch) if self.settings.opensearch else None

    def name(self, version: str) -> str:
        return f"{self.settings.alias}-{version}"

    def build(
        self,
        version: str,
        dim: int,
        field_types: dict[str, FieldType],
        batches: Iterable[PointBatch],
        stemmer: Stemmer = "english",
    ) -> dict[str, int]:
        """Write ``version`` on every configured server; returns each one's point count. A
        collection or index left by an interrupted build of the same version is replaced."""
        self.drop(version)
        qdrant = opensearch = None
        if self._qdrant is not None:
            qdrant = QdrantServerStore.create(
                self._qdrant, self.settings.alias, dim, version=version, field_types=field_types, retry=self.retry
            )
        if self._opensearch is not None:
            opensearch = OpenSearchStore.create(
                self._opensearch, self.settings.alias, field_types=field_types, version=version,
                sparse=qdrant is None, replicas=self.settings.opensearch_replicas, retry=self.retry, stemmer=stemmer,
                snapshot_repository=self.settings.snapshot_repository,
            )
        for payloads, dense, sparse in batches:
            if qdrant is not None:
                qdrant.upsert(payloads, dense=dense, sparse=sparse)
            if opensearch is not None:
                opensearch.upsert(payloads, sparse=None if qdrant is not None else sparse)
        counts = {}
        for store in (qdrant, opensearch):
            if store is not None:
                store.finalize()
                counts[store.backend] = store.count()
        return counts

    def stores(self, version: str) -> dict[Strategy, IndexStore]:
        """The stores that serve ``version``, by the strategy each serves (Qdrant SPLADE over OpenSearch's)."""
        served: dict[Strategy, IndexStore] = {}
        if self._opensearch is not None:
            opensearch = OpenSearchStore.open(
                self._opensearch, self.name(version), retry=self.retry,
                snapshot_repository=self.settings.snapshot_repository,
            )
            served[Strategy.BM25] = opensearch
            if opensearch.sparse:  # a lexical-only index (built next to Qdrant) has no SPLADE features
                served[Strategy.SPLADE] = opensearch
        if self._qdrant is not None:
            qdrant = QdrantServerStore.open(self._qdrant, self.name(version), retry=self.retry)
            served |= {Strategy.DENSE: qdrant, Strategy.SPLADE: qdrant}
        return served

    def chunk_ids(self, version: str) -> dict[str, set[str]]:
        distinct = {id(s): s for s in self.stores(version).values()}.values()
        return {store.backend: store.chunk_ids() for store in distinct}

    def promote(self, version: str, *, snapshot: bool = True) -> None:
        """Move the aliases to ``version``: snapshot first, then Qdrant, then OpenSearch.

        The OpenSearch snapshot (when a repository is configured and ``snapshot``) is taken
        before any alias moves, so a snapshot that fails leaves every alias, and the pointer
        the caller moves afterwards, where they were. If OpenSearch then refuses the alias
        change, the Qdrant alias is moved back (or removed, if it named nothing before), so the
        servers never disagree about what serves. Alias changes and the snapshot run under the
        retry policy."""
        stores = self.stores(version)
        qdrant, opensearch = stores.get(Strategy.DENSE), stores.get(Strategy.BM25)
        if snapshot and isinstance(opensearch, OpenSearchStore) and opensearch.snapshot_repository:
            opensearch.snapshot()
        moved = isinstance(qdrant, QdrantServerStore)
        previous_collection = qdrant.promote() if isinstance(qdrant, QdrantServerStore) else None
        if not isinstance(opensearch, OpenSearchStore):
            return
        try:
            opensearch.promote()
        except Exception:
            if moved and previous_collection:
                QdrantServerStore.open(self._qdrant, previous_collection, retry=self.retry).promote()
            elif moved and isinstance(qdrant, QdrantServerStore):
                qdrant.unpromote()
            raise

    def drop(self, version: str) -> None:
        """Delete ``version`` from every server (an interrupted build's leftovers, or a pruned version)."""
        name = self.name(version)
        if self._qdrant is not None and self.retry.run(
            lambda: self._qdrant.collection_exists(name), qdrant_transient, f"Qdrant collection exists {name}"
        ):
            self.retry.run(lambda: self._qdrant.delete_collection(name), qdrant_transient, f"Qdrant delete {name}")
        if self._opensearch is not None:
            self.retry.run(
                lambda: self._opensearch.indices.delete(index=name, ignore_unavailable=True),
                opensearch_transient,
                f"OpenSearch delete {name}",
            )


def switch_serving(
    versions: IndexVersions, servers: ServerIndexes | None, version: IndexVersion, reason: str, **facts: Any
) -> None:
    """Promote ``version``: server aliases first, then the pointer, so a server that refuses
    leaves serving where it was."""
    if servers is not None:
        servers.promote(version.id)
    versions.promote(version, reason=reason, **facts)


def roll_back(
    versions: IndexVersions,
    servers: ServerIndexes | None,
    to: str | None = None,
    *,
    force: bool = False,
    by: str | None = None,
    why: str | None = None,
) -> IndexVersion:
    """Serve ``to``, or the version promoted before the current one, on the servers too; a
    version the promotion gate refused only with ``force`` (``IndexVersions.rollback``)."""
    target = versions.rollback_target(to)
    versions.check_rollback(target, force)  # before the servers move
    if servers is not None:
        # The target was snapshotted when it was first promoted; a rollback must not wait on
        # (or fail with) a new snapshot.
        servers.promote(target.id, snapshot=False)
    return versions.rollback(target.id, force=force, by=by, why=why)
