"""SPLADE learned sparse encoder on a transformers masked-LM (the packaged splade-tiny by default)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from retrieval_assets.core.embed.base import ProgressCallback, SparseEncoder, plan_batches
from retrieval_assets.core.embed.device import resolve_device
from retrieval_assets.core.embed.packaged import load_resolved, model_load_error, resolve_model_path
from retrieval_assets.core.models import SparseVector

if TYPE_CHECKING:
    import torch


# Tokens per slice of the vocabulary head: 512 x 30,522 floats, about 60 MB.
HEAD_TOKENS = 512


class SpladeEncoder(SparseEncoder):
    """Term weights ``max over tokens of log1p(relu(MLM logits))``, one per vocabulary term.

    ``top_terms`` keeps only the heaviest terms of each vector (ties broken by term id);
    None keeps every nonzero term. Queries and documents are encoded alike.
    """

    # fp32 with masked padding: a query's weights in a batch move by ~1e-6 only, so concurrent
    # queries may share a model call (core/embed/batching.py).
    query_batches_exact = True

    def __init__(
        self,
        model_name_or_path: str,
        *,
        model_name: str | None = None,
        device: str = "cpu",
        batch_size: int = 16,
        max_length: int = 512,
        top_terms: int | None = None,
        max_batch_tokens: int = 4096,
        local_files_only: bool = False,
    ) -> None:
        from transformers import AutoModelForMaskedLM, AutoTokenizer  # deferred: imports torch

        self._tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, local_files_only=local_files_only)
        self._model = AutoModelForMaskedLM.from_pretrained(model_name_or_path, local_files_only=local_files_only)
        self._model.to(device).eval()
        self.vocab_size = int(self._model.config.vocab_size)
        self.model_name = model_name or model_name_or_path
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.top_terms = top_terms
        # The MLM logits are tokens x 30,522 floats: 4,096 padded tokens per batch keeps them
        # near 0.5 GB, where 16 texts of 512 tokens would take 1 GB.
        self.max_batch_tokens = max_batch_tokens

    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> list[SparseVector]:
        return self._encode(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> list[SparseVector]:
        return self._encode(texts)

    def id_to_term(self, term_id: int) -> str:
        return str(self._tokenizer.convert_ids_to_tokens(int(term_id)))

    def _encode(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> list[SparseVector]:
        if not texts:
            return []
        features = self._tokenizer(list(texts), truncation=True, max_length=self.max_length)
        # Length-sorted batches with padding, not identical-length groups: the model is fp32 (not
        # quantised) and padded positions are masked. The drift that batch company still causes
        # (~1e-6 on weights up to ~3, from float summation order) shows among equal-length texts
        # too; only batch_size=1 is bit-exact.
        lengths = [len(ids) for ids in features["input_ids"]]
        vectors: list[SparseVector | None] = [None] * len(texts)
        done = 0
        for batch in plan_batches(lengths, self.batch_size, same_length=False, max_batch_tokens=self.max_batch_tokens):
            padded = self._tokenizer.pad(
                [{key: values[i] for key, values in features.items()} for i in batch], return_tensors="pt"
            )
            for index, row in zip(batch, self._weights(padded), strict=True):
                vectors[index] = self._to_sparse(row)
            done += len(batch)
            if progress is not None:
                progress(done, len(texts))
        return cast(list[SparseVector], vectors)  # every slot was filled above

    def _weights(self, batch: Mapping[str, torch.Tensor]) -> np.ndarray:
        """(batch, vocab_size) SPLADE weights."""
        import torch

        with torch.inference_mode():
            inputs = {key: tensor.to(self.device) for key, tensor in batch.items()}
            mask = inputs["attention_mask"]
            head = _mlm_head(self._model)
            if head is not None:
                # The vocabulary head (tokens x 128 x 30,522 here) is most of the work: run it on
                # the real tokens only, so padding a batch costs only the cheap encoder layers.
                # Same figures as the padded path below (the head sees each token alone).
                hidden = self._model.base_model(**inputs).last_hidden_state
                tokens = hidden[mask.bool()]
                text_of = torch.repeat_interleave(torch.arange(mask.shape[0], device=mask.device), mask.sum(dim=1))
                # Slice by slice, each token's weights maxed into its text's row (weights are
                # >= 0, so rows start at 0): the logits of a whole batch (4,096 tokens x 30,522
                # floats, 0.5 GB, twice that with the head's temporaries) were the largest
                # allocation of a full build.
                pooled = torch.zeros((mask.shape[0], self.vocab_size), device=tokens.device)
                for start in range(0, len(tokens), HEAD_TOKENS):
                    weights = head(tokens[start : start + HEAD_TOKENS]).relu_().log1p_()
                    pooled.index_reduce_(0, text_of[start : start + HEAD_TOKENS], weights.float(), "amax")
                return pooled.cpu().numpy()
            logits = self._model(**inputs).logits  # (batch, length, vocab_size)
            # In place: the logits are batch x length x 30,522 floats, the largest tensor here.
            weights = logits.relu_().log1p_()
            # Weights are >= 0, so zeroing padded positions keeps them out of the max.
            weights.mul_(mask.unsqueeze(-1).to(weights.dtype))
            return weights.amax(dim=1).float().cpu().numpy()

    def _to_sparse(self, row: np.ndarray) -> SparseVector:
        indices = np.flatnonzero(row)
        if self.top_terms is not None and indices.size > self.top_terms:
            heaviest = np.argsort(-row[indices], kind="stable")[: self.top_terms]
            indices = np.sort(indices[heaviest])
        return SparseVector(indices=indices.tolist(), values=row[indices].astype(float).tolist())


def _mlm_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The vocabulary head of a BERT (``cls``) or RoBERTa (``lm_head``) masked LM, which maps each
    token's hidden state to its logits on its own; None for other architectures."""
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if head is not None:
            return cast("torch.nn.Module", head)
    return None


def load_sparse_encoder(
    name_or_path: str, device: str = "auto", batch_size: int = 16, max_length: int = 512
) -> SparseEncoder:
    """Load a SPLADE encoder by packaged name ("splade-tiny"), local directory or hub name.

    Raises ModelLoadError, naming the model and how to provide it, when it cannot be loaded.
    """
    resolved = resolve_model_path(name_or_path)
    if resolved.kind not in ("masked_lm", "hf_name") or resolved.role not in (None, "sparse"):
        what = (resolved.role or resolved.kind).replace("_", "-")
        raise model_load_error(name_or_path, f"it is a {what} model, not a masked-LM for SPLADE", "sparse")
    target = resolve_device(device)
    return load_resolved(
        resolved,
        lambda local_files_only: SpladeEncoder(
            resolved.path,
            model_name=name_or_path,
            device=target,
            batch_size=batch_size,
            max_length=max_length,
            local_files_only=local_files_only,
        ),
        role="sparse",
    )
