"""Encoders from ``ModelSettings``: the one place settings become loaded models."""

from __future__ import annotations

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.remote import RemoteDenseEncoder
from retrieval_assets.core.embed.sparse import load_sparse_encoder
from retrieval_assets.core.settings import ModelSettings


def dense_encoder_for(settings: ModelSettings, api_key: str | None = None) -> DenseEncoder:
    """The configured dense encoder: ``settings.dense_endpoint``'s model when an endpoint is set
    (``api_key`` is its key), else ``settings.dense_model`` loaded in process."""
    if settings.dense_endpoint:
        query_model = settings.dense_endpoint_query_model
        return RemoteDenseEncoder(
            settings.dense_endpoint,
            settings.dense_model,
            api_key=api_key,
            batch_size=settings.dense_endpoint_batch,
            concurrency=settings.dense_endpoint_concurrency,
            timeout_s=settings.dense_endpoint_timeout_s,
            retries=settings.dense_endpoint_retries,
            query_prefix=settings.dense_endpoint_query_prefix,
            query_encoder=(
                load_dense_encoder(query_model, device=settings.device, max_length=settings.max_length)
                if query_model
                else None
            ),
        )
    return load_dense_encoder(
        settings.dense_model, device=settings.device, batch_size=settings.batch_size, max_length=settings.max_length
    )


def sparse_encoder_for(settings: ModelSettings) -> SparseEncoder:
    return load_sparse_encoder(
        settings.sparse_model, device=settings.device, batch_size=settings.batch_size, max_length=settings.max_length
    )
