"""Vocabulary-neighbour query expansion over the ``vocabulary`` asset.

The vocabulary holds the catalog's terms (from names, descriptions and keywords) with their
dense embeddings. A query term's neighbours are vocabulary terms whose cosine to it reaches a
threshold; they are added to the lexical query with a weight below the query's own terms, so
a catalog that says "tumour" is found for "tumor" and "neoplasm" without drowning the query.

Each term names the tenants whose documents hold it: a query scoped to some tenants is expanded
only with their terms, since another tenant's words would tell what its documents say.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.vectors import l2_normalise
from retrieval_assets.core.index.vocabulary import VOCABULARY_COLUMNS, words

logger = logging.getLogger(__name__)


class VocabularyIndex:
    """Terms, their document frequencies, tenants and L2-normalised embeddings, in memory.

    ``tenants`` lists, per term, the tenants it was chosen for; None for a vocabulary built
    before terms named their tenants, which then expands no query scoped to tenants.
    ``tenant_doc_freq`` gives those tenants' document counts (aligned with ``tenants``), so that
    a scoped query weighs terms by its own tenants' documents; None for a vocabulary built
    before it was kept."""

    def __init__(
        self,
        terms: Sequence[str],
        doc_freq: Sequence[int],
        embeddings: np.ndarray,
        tenants: Sequence[Iterable[str]] | None = None,
        tenant_doc_freq: Sequence[Iterable[int]] | None = None,
    ) -> None:
        self.terms = list(terms)
        self.doc_freq = dict(zip(self.terms, (int(df) for df in doc_freq), strict=True))
        # tenant -> {term: documents of that tenant holding it}
        self._tenant_doc_freq: dict[str, dict[str, int]] | None = None
        if tenants is not None and tenant_doc_freq is not None:
            per_tenant: dict[str, dict[str, int]] = {}
            for term, held, counts in zip(self.terms, tenants, tenant_doc_freq, strict=True):
                for tenant, n in zip(held, counts, strict=True):
                    per_tenant.setdefault(str(tenant), {})[term] = int(n)
            self._tenant_doc_freq = per_tenant
        self._matrix = l2_normalise(np.asarray(embeddings, dtype=np.float32).reshape(len(terms), -1))
        self._position = {term: row for row, term in enumerate(self.terms)}
        # Each tenant's term rows, so that scoping a query costs a mask over the vocabulary.
        self._tenant_rows: dict[str, np.ndarray] | None = None
        if tenants is not None:
            rows: dict[str, list[int]] = {}
            for row, held in enumerate(tenants):
                for tenant in held:
                    rows.setdefault(str(tenant), []).append(row)
            self._tenant_rows = {tenant: np.asarray(held, dtype=np.intp) for tenant, held in rows.items()}
        self._warned = False

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> VocabularyIndex:
        # "tenants" may be absent: a vocabulary built before it existed is still served.
        optional = {"tenants", "tenant_doc_freq"}  # absent from vocabularies built before they were kept
        missing = [c for c in VOCABULARY_COLUMNS if c not in frame.columns and c not in optional]
        if missing:
            raise ValueError(f"vocabulary frame lacks columns {missing}")
        embeddings = np.stack(frame["embedding"].to_list()) if len(frame) else np.zeros((0, 1), np.float32)
        tenants = frame["tenants"].tolist() if "tenants" in frame.columns else None
        counts = frame["tenant_doc_freq"].tolist() if "tenant_doc_freq" in frame.columns else None
        return cls(frame["term"].tolist(), frame["doc_freq"].tolist(), embeddings, tenants, counts)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> VocabularyIndex:
        return cls.from_frame(pd.read_parquet(path))

    def __len__(self) -> int:
        return len(self.terms)

    def doc_freq_in(self, tenants: Collection[str] | None) -> Mapping[str, int] | None:
        """Documents holding each term, counted over ``tenants``' documents only (None: every
        tenant's); None when this vocabulary has no per-tenant counts."""
        if tenants is None:
            return self.doc_freq
        if self._tenant_doc_freq is None:
            return None
        counts: Counter[str] = Counter()
        for tenant in tenants:
            counts.update(self._tenant_doc_freq.get(tenant, {}))
        return counts

    def neighbours(
        self,
        query: str,
        encoder: DenseEncoder,
        *,
        threshold: float,
        max_terms: int,
        weight: float,
        tenants: Collection[str] | None = None,
    ) -> dict[str, float]:
        """Up to ``max_terms`` vocabulary terms with cosine >= ``threshold`` to some query term,
        weighted ``weight * cosine``, best first. Query terms themselves are never added. With
        ``tenants``, only terms that a document of one of them holds (None: any term).

        Query terms outside the vocabulary are embedded with ``encoder`` (one call for all).
        """
        query_terms = list(dict.fromkeys(words(query)))
        if not query_terms or not self.terms:
            return {}
        allowed = self._allowed(tenants)
        if allowed is not None and not allowed.any():
            return {}
        known = [t for t in query_terms if t in self._position]
        unknown = [t for t in query_terms if t not in self._position]
        vectors = [self._matrix[[self._position[t] for t in known]]]
        if unknown:
            vectors.append(np.asarray(encoder.encode_documents(unknown), dtype=np.float32))  # unit length by the port
        similarity = (np.concatenate(vectors) @ self._matrix.T).max(axis=0)
        for term in known:
            similarity[self._position[term]] = -1.0
        reached = similarity >= threshold
        if allowed is not None:
            reached &= allowed
        candidates = np.flatnonzero(reached)
        # Best first; ties by term so expansion is reproducible.
        ranked = sorted(candidates.tolist(), key=lambda row: (-similarity[row], self.terms[row]))[:max_terms]
        return {self.terms[row]: round(float(weight * similarity[row]), 4) for row in ranked}

    def _allowed(self, tenants: Collection[str] | None) -> np.ndarray | None:
        """Which terms a query scoped to ``tenants`` may be expanded with; None: every term."""
        if tenants is None:
            return None
        allowed = np.zeros(len(self.terms), dtype=bool)
        if self._tenant_rows is None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "the vocabulary names no tenants (built before terms did): queries scoped to tenants "
                    "are not expanded until the index is rebuilt"
                )
            return allowed
        for tenant in tenants:
            if (rows := self._tenant_rows.get(tenant)) is not None:
                allowed[rows] = True
        return allowed
