"""Encoder ports: what the pipeline and the retriever need from a model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from retrieval_assets.core.models import SparseVector

# Called after each batch with (texts_done, texts_total), so Dagster logs and tqdm can both report.
ProgressCallback = Callable[[int, int], None]
# (stage label) -> progress callback; lets the CLI show tqdm bars and Dagster write log lines.
ProgressFactory = Callable[[str], ProgressCallback | None]


def plan_batches(
    lengths: Sequence[int], batch_size: int, same_length: bool, max_batch_tokens: int | None = None
) -> list[list[int]]:
    """Indices in length order, cut into batches of at most ``batch_size``.

    With ``same_length`` a batch never mixes token lengths, so it needs no padding. With
    ``max_batch_tokens`` a batch also stops before its padded size (texts x longest length)
    would pass it, which bounds the activations of long texts.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for index in order:
        current = batches[-1] if batches else None
        if (
            current is None
            or len(current) == batch_size
            or (same_length and lengths[current[0]] != lengths[index])
            or (max_batch_tokens is not None and (len(current) + 1) * lengths[index] > max_batch_tokens)
        ):
            batches.append([index])
        else:
            current.append(index)
    return batches


class ModelLoadError(RuntimeError):
    """A configured model could not be loaded; the message names it and how to provide it."""


def encoder_fingerprint(encoder: object) -> str:
    """What decides an encoder's output: cached vectors are reused only under the same fingerprint.

    A remote encoder's ``endpoint`` (its URL) is part of it: another server may serve another
    revision of a model under the same name."""
    facts = [type(encoder).__name__, getattr(encoder, "model_name", "")]
    facts += [
        f"{name}={getattr(encoder, name)}"
        for name in ("dim", "max_length", "top_terms", "graph", "endpoint")
        if hasattr(encoder, name)
    ]
    return "|".join(str(fact) for fact in facts)


class DenseEncoder(ABC):
    model_name: str
    dim: int

    @abstractmethod
    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> np.ndarray:
        """L2-normalised float32 array of shape (len(texts), dim)."""

    @abstractmethod
    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Like encode_documents, with the model's query instruction applied."""


class SparseEncoder(ABC):
    model_name: str
    vocab_size: int

    @abstractmethod
    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> list[SparseVector]: ...

    @abstractmethod
    def encode_queries(self, texts: Sequence[str]) -> list[SparseVector]: ...

    @abstractmethod
    def id_to_term(self, term_id: int) -> str:
        """Vocabulary term for a sparse dimension, for diagnostics and the vocabulary asset."""
