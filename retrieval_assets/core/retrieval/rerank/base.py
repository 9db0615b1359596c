"""Reranker port: what the retriever needs from a cross-encoder."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class Reranker(ABC):
    """Scores (query, passage) pairs jointly, which first-stage retrieval cannot afford to do."""

    model_name: str

    @abstractmethod
    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """float32 relevance, higher is better: one score per passage, in the order given.

        Scores rank the passages of one call; they are not probabilities and need not be
        comparable across models.
        """
