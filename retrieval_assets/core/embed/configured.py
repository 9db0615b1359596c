"""Encoders from ``ModelSettings``: the one place settings become loaded models."""

from __future__ import annotations

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.sparse import load_sparse_encoder
from retrieval_assets.core.settings import ModelSettings


def dense_encoder_for(settings: ModelSettings) -> DenseEncoder:
    return load_dense_encoder(
        settings.dense_model, device=settings.device, batch_size=settings.batch_size, max_length=settings.max_length
    )


def sparse_encoder_for(settings: ModelSettings) -> SparseEncoder:
    return load_sparse_encoder(
        settings.sparse_model, device=settings.device, batch_size=settings.batch_size, max_length=settings.max_length
    )
