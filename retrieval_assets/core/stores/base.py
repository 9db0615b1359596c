"""Index-store ports. Embedded engines and server adapters implement the same interface.

Every stored point carries a payload with at least ``doc_id``, ``chunk_id``, ``tenant_id``,
``section``, ``title`` and ``text``, plus the document's flat metadata fields.
Point identity is the ``chunk_id``; stores derive their native ids from it deterministically.
"""

from __future__ import annotations

import hashlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrieval_assets.core.filters import MetadataFilter
from retrieval_assets.core.models import SparseVector, StoreHit

Payload = dict[str, Any]
REQUIRED_PAYLOAD_FIELDS = ("doc_id", "chunk_id", "tenant_id", "section", "title", "text")

_POINT_NAMESPACE = uuid.UUID("6f1c1b9e-5d0a-4d0e-9a43-6b1f3b2c7e10")


def point_uuid(chunk_id: str) -> str:
    """Deterministic UUID for engines that need UUID or integer point ids (Qdrant)."""
    return str(uuid.uuid5(_POINT_NAMESPACE, chunk_id))


def point_int64(chunk_id: str) -> int:
    """Deterministic non-negative int64 id for engines keyed by integers (FAISS)."""
    digest = hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


class IndexStore(ABC):
    """Common lifecycle of every store."""

    backend: str

    @abstractmethod
    def count(self) -> int: ...

    @abstractmethod
    def chunk_ids(self) -> set[str]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files or connections."""


class DenseStore(IndexStore):
    @abstractmethod
    def upsert_dense(self, payloads: Sequence[Payload], vectors: np.ndarray) -> None: ...

    @abstractmethod
    def search_dense(
        self, vector: np.ndarray, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]: ...


class SparseStore(IndexStore):
    @abstractmethod
    def upsert_sparse(self, payloads: Sequence[Payload], vectors: Sequence[SparseVector]) -> None: ...

    @abstractmethod
    def search_sparse(
        self, vector: SparseVector, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]: ...


class LexicalStore(IndexStore):
    @abstractmethod
    def add(self, payloads: Sequence[Payload]) -> None: ...

    @abstractmethod
    def search_text(
        self, query: str, top_k: int, filters: Sequence[MetadataFilter] = ()
    ) -> list[StoreHit]: ...
