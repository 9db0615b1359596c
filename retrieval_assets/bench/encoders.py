"""``bench-encoders``: the configured dense and SPLADE encoders where a build would run them.

The encoders are loaded as the build loads them (``ModelSettings``: CUDA when torch sees a GPU,
unless ``device`` says otherwise). For each it reports the device it ran on, documents a second
over a BEIR corpus's first records (title and text), a query's P50/P95 one at a time, and how far
a document's output in its batch lies from the same document encoded alone. ``--reference-out``
keeps the outputs; ``--reference`` compares against outputs kept on another machine, such as
CUDA against this CPU. With ``--dense-endpoint``, dense vectors come from that OpenAI-compatible
server, and the same model in process is measured beside it (``dense_in_process``), with how
far the two sets of vectors lie apart.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_assets.bench.report import emit_figures, tqdm_progress
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.evaluation.metrics import latency_percentiles
from retrieval_assets.core.ingest.catalog import CatalogError, catalog_file, load_gold, read_raw_rows
from retrieval_assets.core.models import SparseVector
from retrieval_assets.core.settings import ModelSettings

QUERIES = 200
WARM_UP_TEXTS = 16


def bench_encoders(
    dataset: Path,
    documents: int,
    alone: int,
    settings: ModelSettings,
    reference: str | None,
    reference_out: str | None,
    json_out: str | None,
) -> int:
    texts = corpus_texts(dataset, documents)
    queries = list(load_gold(dataset).queries.values())[:QUERIES]
    kept = np.load(reference) if reference else None
    figures: dict[str, Any] = {"documents": len(texts), "alone": min(alone, len(texts)), "queries": len(queries)}
    outputs: dict[str, np.ndarray] = {}

    # The endpoint's key, as the code location reads it (defs/resources.py).
    dense = dense_encoder_for(settings, os.environ.get("RETRIEVAL_EMBEDDING_API_KEY"))
    vectors, figures["dense"] = _measure(dense, texts, queries, alone, _dense_gap, "dense")
    outputs["dense"] = vectors
    if kept is not None:
        figures["dense"]["against_reference"] = _dense_against(vectors, kept["dense"])
    del dense
    if settings.dense_endpoint:  # the same model in process, measured beside the endpoint
        local = dense_encoder_for(settings.model_copy(update={"dense_endpoint": None}))
        local_vectors, figures["dense_in_process"] = _measure(local, texts, queries, alone, _dense_gap, "dense")
        figures["dense"]["against_in_process"] = _dense_against(vectors, local_vectors)
        del local

    sparse = sparse_encoder_for(settings)
    weights, figures["sparse"] = _measure(sparse, texts, queries, alone, _sparse_gap, "sparse")
    outputs.update({f"sparse_{key}": value for key, value in pack_sparse(weights).items()})
    if kept is not None:
        figures["sparse"]["against_reference"] = _sparse_against(
            weights,
            unpack_sparse({key.removeprefix("sparse_"): kept[key] for key in kept.files if key.startswith("sparse_")}),
        )
    if reference_out:
        np.savez_compressed(reference_out, allow_pickle=False, **outputs)
    emit_figures(
        {
            "bench": "encoders",
            "models": settings.model_dump(include={"dense_model", "dense_endpoint", "sparse_model", "device"}),
            **figures,
        },
        json_out,
    )
    return 0


def corpus_texts(dataset: Path, documents: int) -> list[str]:
    """The first ``documents`` records of a BEIR corpus as title and text."""
    texts: list[str] = []
    for row in read_raw_rows(catalog_file(dataset, "beir")):
        if len(texts) == documents:
            break
        if row.raw.strip():
            try:
                record = json.loads(row.raw)
            except json.JSONDecodeError as error:
                raise CatalogError(f"{row.source}:{row.line_number}: malformed record ({error})") from None
            texts.append(f"{record.get('title') or ''}\n{record.get('text') or ''}".strip())
    return texts


def _measure(
    encoder: Any,
    texts: Sequence[str],
    queries: Sequence[str],
    alone: int,
    gap: Callable[[Any, Any], float],
    label: str,
) -> tuple[Any, dict[str, Any]]:
    """Outputs of ``texts`` in the encoder's batches, and its figures."""
    encoder.encode_documents(texts[:WARM_UP_TEXTS])  # first-run costs: CUDA context, kernel choice
    started = time.perf_counter()
    outputs = encoder.encode_documents(texts, progress=tqdm_progress(f"{label} documents"))
    seconds = time.perf_counter() - started
    singles = [encoder.encode_documents([text]) for text in texts[:alone]]
    latencies = []
    for query in queries:
        started = time.perf_counter()
        encoder.encode_queries([query])
        latencies.append((time.perf_counter() - started) * 1000)
    return outputs, {
        "model": encoder.model_name,
        # An endpoint's encoder runs where its server does: named by its URL.
        "device": getattr(encoder, "endpoint", None) or encoder.device,
        "documents_per_s": round(len(texts) / seconds, 1),
        "batch_vs_alone_max_abs": max(
            (gap(outputs[i : i + 1], single) for i, single in enumerate(singles)), default=0.0
        ),
        "query": {key: round(value, 2) for key, value in latency_percentiles(latencies).items()},
    }


def _dense_gap(batched: np.ndarray, single: np.ndarray) -> float:
    return float(np.abs(batched - single).max())


def _sparse_gap(batched: Sequence[SparseVector], single: Sequence[SparseVector]) -> float:
    return _sparse_max_abs(batched[0], single[0])


def _sparse_max_abs(left: SparseVector, right: SparseVector) -> float:
    """Largest weight difference over both vectors' terms (a term one lacks weighs 0 there)."""
    weights = dict(zip(left.indices, left.values, strict=True))
    other = dict(zip(right.indices, right.values, strict=True))
    return max(
        (abs(weights.get(term, 0.0) - other.get(term, 0.0)) for term in weights.keys() | other.keys()), default=0.0
    )


def _dense_against(vectors: np.ndarray, kept: np.ndarray) -> dict[str, float | int]:
    shared = min(len(vectors), len(kept))
    cosine = (vectors[:shared] * kept[:shared]).sum(axis=1)
    return {
        "documents": shared,
        "max_abs": float(np.abs(vectors[:shared] - kept[:shared]).max()),
        "min_cosine": float(cosine.min()),
    }


def _sparse_against(weights: Sequence[SparseVector], kept: Sequence[SparseVector]) -> dict[str, float | int]:
    shared = min(len(weights), len(kept))
    return {
        "documents": shared,
        "max_abs": max(_sparse_max_abs(weights[i], kept[i]) for i in range(shared)),
        "documents_with_other_terms": sum(set(weights[i].indices) != set(kept[i].indices) for i in range(shared)),
    }


def pack_sparse(vectors: Sequence[SparseVector]) -> dict[str, np.ndarray]:
    """Sparse vectors as three arrays, for ``np.savez``."""
    return {
        "offsets": np.cumsum([0] + [len(vector.indices) for vector in vectors]),
        "indices": np.asarray([i for vector in vectors for i in vector.indices], dtype=np.int64),
        "values": np.asarray([v for vector in vectors for v in vector.values], dtype=np.float64),
    }


def unpack_sparse(packed: dict[str, np.ndarray]) -> list[SparseVector]:
    offsets = packed["offsets"]
    return [
        SparseVector(indices=packed["indices"][lo:hi].tolist(), values=packed["values"][lo:hi].tolist())
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)
    ]
