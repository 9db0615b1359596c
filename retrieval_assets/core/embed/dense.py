"""Dense encoder adapters: BERT-style ONNX exports (the packaged bge-small) and sentence-transformers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, plan_batches
from retrieval_assets.core.embed.device import onnx_providers, resolve_device
from retrieval_assets.core.embed.packaged import Pooling, load_resolved, resolve_for_role
from retrieval_assets.core.embed.vectors import l2_normalise

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxDenseEncoder(DenseEncoder):
    """A BERT-style ONNX export run with onnxruntime, tokenised with its ``tokenizer.json``.

    Dynamically quantised (INT8) exports such as the packaged bge-small compute activation
    scales over the whole input tensor, so a text's vector depends on its batch company, even
    among texts of identical length. With ``batch_invariant`` (the default) every text runs on
    its own and its vector depends on the text alone, as content-hash caches and "re-run equals
    full build" need. Without it, texts of identical token length share a run (never padded),
    which was up to about twice as fast on short texts here but left vectors at cosine ~0.995
    to the unbatched ones.

    Its queries are therefore never micro-batched (``core/embed/batching.py``): sharing a run
    shares the activation scales, padded or not, and on SciFact's 300 test queries that changed
    most top-10 lists (docs/http-api.md "Query micro-batching").
    """

    query_batches_exact = False  # see batching.batching_dense_encoder

    def __init__(
        self,
        model_dir: str | Path,
        *,
        model_name: str | None = None,
        pooling: Pooling = "cls",
        query_prefix: str = "",
        max_length: int = 512,
        batch_size: int = 16,
        device: str = "cpu",
        intra_op_threads: int | None = None,
        batch_invariant: bool = True,
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        options = onnxruntime.SessionOptions()
        if intra_op_threads is not None:
            options.intra_op_num_threads = intra_op_threads
        self._session = onnxruntime.InferenceSession(
            str(model_dir / "model.onnx"), sess_options=options, providers=onnx_providers(device)
        )
        # A query is short and runs beside the other strategies' searches: on CPU one intra-op
        # thread encoded SciFact queries as fast as two (3.3 ms P50) and cut hybrid P95 from 10.1
        # to 9.0 ms by leaving the other core to BM25. Documents keep the multi-threaded session.
        self._query_session = self._session
        if device != "cuda":
            query_options = onnxruntime.SessionOptions()
            query_options.intra_op_num_threads = 1
            self._query_session = onnxruntime.InferenceSession(
                str(model_dir / "model.onnx"), sess_options=query_options, providers=onnx_providers(device)
            )
        self._inputs = [i.name for i in self._session.get_inputs()]
        unsupported = set(self._inputs) - set(_ONNX_INPUTS)
        if unsupported:
            raise ValueError(f"ONNX model needs inputs this encoder cannot feed: {sorted(unsupported)}")
        self._output = self._session.get_outputs()[0].name
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length)
        self._tokenizer.no_padding()

        self.model_name = model_name or str(model_dir)
        self.max_length = max_length
        self.device = device
        self.pooling = pooling
        self.query_prefix = query_prefix
        self.batch_size = batch_size
        self.batch_invariant = batch_invariant
        # One real run: a broken model fails at load time, not halfway through a build.
        self.dim = int(self._encode(["dimension probe"]).shape[1])

    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> np.ndarray:
        return self._encode(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.query_prefix + text for text in texts], session=self._query_session)

    def _encode(
        self, texts: Sequence[str], progress: ProgressCallback | None = None, session: Any = None
    ) -> np.ndarray:
        session = session or self._session
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        token_ids = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
        vectors: list[np.ndarray | None] = [None] * len(texts)
        done = 0
        batches = plan_batches(
            [len(ids) for ids in token_ids], self.batch_size, same_length=not self.batch_invariant
        )
        for batch in batches:
            if self.batch_invariant:
                pooled = np.concatenate([self._run(session, np.asarray([token_ids[i]])) for i in batch])
            else:
                pooled = self._run(session, np.asarray([token_ids[i] for i in batch]))
            for index, vector in zip(batch, pooled, strict=True):
                vectors[index] = vector
            done += len(batch)
            if progress is not None:
                progress(done, len(texts))
        return l2_normalise(np.stack(cast(list[np.ndarray], vectors)))  # every slot was filled above

    def _run(self, session: Any, input_ids: np.ndarray) -> np.ndarray:
        """Pooled vectors for a (batch, length) block of unpadded token ids."""
        input_ids = input_ids.astype(np.int64)
        feeds = {
            "input_ids": input_ids,
            "attention_mask": np.ones_like(input_ids),
            "token_type_ids": np.zeros_like(input_ids),
        }
        output = session.run([self._output], {name: feeds[name] for name in self._inputs})[0]
        if output.ndim == 2:  # the export pools already
            return output
        # (batch, length, dim) token states; batches hold no padding, so a plain mean is exact.
        return output[:, 0] if self.pooling == "cls" else output.mean(axis=1)


class SentenceTransformerDenseEncoder(DenseEncoder):
    """A sentence-transformers model from a local directory or a Hugging Face hub name."""

    # fp32 with masked padding: a query's vector in a batch moves by ~1e-7 only, so concurrent
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
        query_prompt: str | None = None,
        local_files_only: bool = False,
    ) -> None:
        from sentence_transformers import SentenceTransformer  # deferred: imports torch

        self._model: SentenceTransformer = SentenceTransformer(
            model_name_or_path, device=device, local_files_only=local_files_only
        )
        # Never beyond what the model was set up for (all-MiniLM-L6-v2: 256).
        self._model.max_seq_length = min(max_length, self._model.max_seq_length or max_length)
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise ValueError(f"{model_name_or_path} does not report an embedding dimension")
        self.dim = dim
        self.model_name = model_name or model_name_or_path
        self.max_length = self._model.max_seq_length
        self.device = device
        self.batch_size = batch_size
        # None: the model's own "query" prompt, if its config has one.
        self.query_prompt = query_prompt

    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        done = 0
        # Batches cut here (length-sorted, like sentence-transformers does) so progress can be
        # reported per batch; fp32 padding moves vectors by ~1e-7 only.
        for batch in plan_batches([len(text) for text in texts], self.batch_size, same_length=False):
            vectors[batch] = self._model.encode_document(
                [texts[i] for i in batch],
                batch_size=len(batch),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            done += len(batch)
            if progress is not None:
                progress(done, len(texts))
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(
            self._model.encode_query(
                list(texts),
                prompt=self.query_prompt,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )


def load_dense_encoder(
    name_or_path: str, device: str = "auto", batch_size: int = 16, max_length: int = 512
) -> DenseEncoder:
    """Load a dense encoder by packaged name, local directory or Hugging Face hub name.

    Raises ModelLoadError, naming the model and how to provide it, when it cannot be loaded.
    """
    resolved = resolve_for_role(name_or_path, "dense", "dense encoder")
    target = resolve_device(device)

    def load(local_files_only: bool) -> DenseEncoder:
        if resolved.kind == "onnx":
            return OnnxDenseEncoder(
                resolved.path,
                model_name=name_or_path,
                pooling=resolved.pooling,
                query_prefix=resolved.query_prefix,
                max_length=max_length,
                batch_size=batch_size,
                device=target,
            )
        return SentenceTransformerDenseEncoder(
            resolved.path,
            model_name=name_or_path,
            device=target,
            batch_size=batch_size,
            max_length=max_length,
            query_prompt=resolved.query_prefix or None,
            local_files_only=local_files_only,
        )

    return load_resolved(resolved, load, role="dense")
