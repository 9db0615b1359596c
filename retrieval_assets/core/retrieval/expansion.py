"""Vocabulary-neighbour query expansion over the ``vocabulary`` asset.

The vocabulary holds the catalog's terms (from names, descriptions and keywords) with their
dense embeddings. A query term's neighbours are vocabulary terms whose cosine to it reaches a
threshold; they are added to the lexical query with a weight below the query's own terms, so
a catalog that says "tumour" is found for "tumor" and "neoplasm" without drowning the query.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.vectors import l2_normalise
from retrieval_assets.core.index.vocabulary import VOCABULARY_COLUMNS, words


class VocabularyIndex:
    """Terms, their document frequencies and L2-normalised embeddings, in memory."""

    def __init__(self, terms: Sequence[str], doc_freq: Sequence[int], embeddings: np.ndarray) -> None:
        self.terms = list(terms)
        self.doc_freq = dict(zip(self.terms, (int(df) for df in doc_freq), strict=True))
        self._matrix = l2_normalise(np.asarray(embeddings, dtype=np.float32).reshape(len(terms), -1))
        self._position = {term: row for row, term in enumerate(self.terms)}

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> VocabularyIndex:
        missing = [c for c in VOCABULARY_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"vocabulary frame lacks columns {missing}")
        embeddings = np.stack(frame["embedding"].to_list()) if len(frame) else np.zeros((0, 1), np.float32)
        return cls(frame["term"].tolist(), frame["doc_freq"].tolist(), embeddings)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> VocabularyIndex:
        return cls.from_frame(pd.read_parquet(path))

    def __len__(self) -> int:
        return len(self.terms)

    def neighbours(
        self,
        query: str,
        encoder: DenseEncoder,
        *,
        threshold: float,
        max_terms: int,
        weight: float,
    ) -> dict[str, float]:
        """Up to ``max_terms`` vocabulary terms with cosine >= ``threshold`` to some query term,
        weighted ``weight * cosine``, best first. Query terms themselves are never added.

        Query terms outside the vocabulary are embedded with ``encoder`` (one call for all).
        """
        query_terms = list(dict.fromkeys(words(query)))
        if not query_terms or not self.terms:
            return {}
        known = [t for t in query_terms if t in self._position]
        unknown = [t for t in query_terms if t not in self._position]
        vectors = [self._matrix[[self._position[t] for t in known]]]
        if unknown:
            vectors.append(np.asarray(encoder.encode_documents(unknown), dtype=np.float32))  # unit length by the port
        similarity = (np.concatenate(vectors) @ self._matrix.T).max(axis=0)
        for term in known:
            similarity[self._position[term]] = -1.0
        candidates = np.flatnonzero(similarity >= threshold)
        # Best first; ties by term so expansion is reproducible.
        ranked = sorted(candidates.tolist(), key=lambda row: (-similarity[row], self.terms[row]))[:max_terms]
        return {self.terms[row]: round(float(weight * similarity[row]), 4) for row in ranked}
