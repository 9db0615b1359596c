"""Dense encoder adapters: BERT-style ONNX exports (the packaged bge-small) and sentence-transformers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, plan_batches
from retrieval_assets.core.embed.device import onnx_providers, provider_device, resolve_device
from retrieval_assets.core.embed.onnx_graph import load_graph
from retrieval_assets.core.embed.packaged import Pooling, load_resolved, resolve_for_role
from retrieval_assets.core.embed.query_cores import query_encoding_alone
from retrieval_assets.core.embed.vectors import l2_normalise

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# Document runs of an exact ONNX encoder on CPU. 150 SciFact abstracts on AMD EPYC (AVX2), two
# rounds: 4 texts and 2,048 padded tokens per run encoded 6.1-6.3 a second, one text 5.2-5.8,
# 8 texts / 4,096 tokens 5.5-6.1 and 16 / 4,096 5.4-5.6 (docs/benchmarks/exact-encoders.md).
CPU_DOCUMENT_BATCH_TEXTS = 4
CPU_DOCUMENT_MAX_BATCH_TOKENS = 2048


def padded_feeds(
    token_ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]] | None = None
) -> dict[str, np.ndarray]:
    """BERT-style model inputs for one batch, right-padded, the padding masked out."""
    width = max(len(ids) for ids in token_ids)
    feeds = {name: np.zeros((len(token_ids), width), dtype=np.int64) for name in _ONNX_INPUTS}
    for row, ids in enumerate(token_ids):
        feeds["input_ids"][row, : len(ids)] = ids
        feeds["attention_mask"][row, : len(ids)] = 1
        if type_ids is not None:
            feeds["token_type_ids"][row, : len(ids)] = type_ids[row]
    return feeds


class OnnxDenseEncoder(DenseEncoder):
    """A BERT-style ONNX export run with onnxruntime, tokenised with its ``tokenizer.json``.

    With ``dequantize`` (the default) a dynamically quantised (INT8) export such as the packaged
    bge-small is rewritten to fp32 at load time (``onnx_graph.py``). A text's vector is then bit
    for bit the same alone, in any batch and with any padding, so documents are encoded in
    length-ordered padded batches and concurrent queries may share a run
    (``core/embed/batching.py``). Run as shipped (``dequantize=False``, the packaged "-int8"
    names), its activation scales span the batch: every text then runs on its own, so that its
    vector depends on the text alone, as content-hash caches and "re-run equals full build"
    need, and its queries are never micro-batched.
    """

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
        dequantize: bool = True,
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        loaded = load_graph(model_dir / "model.onnx", dequantize)
        options = onnxruntime.SessionOptions()
        if intra_op_threads is not None:
            options.intra_op_num_threads = intra_op_threads
        providers = onnx_providers(device)
        # Asked for CUDA where onnxruntime has no CUDA provider (the CPU wheel), it runs on the
        # CPU and batches as the CPU does.
        device = provider_device(providers)
        self._session = onnxruntime.InferenceSession(loaded.source, sess_options=options, providers=providers)
        # A query is short and runs beside the other strategies' searches: on CPU one intra-op
        # thread encoded SciFact queries as fast as two (3.3 ms P50) and cut hybrid P95 from 10.1
        # to 9.0 ms by leaving the other core to BM25. Documents keep the multi-threaded session,
        # and so does a query that runs alone (``query_cores``): 16-token titles took 7.2 ms P50
        # on two threads against 10.9 ms on one, with the same vectors.
        self._query_session = self._session
        if device != "cuda":
            query_options = onnxruntime.SessionOptions()
            query_options.intra_op_num_threads = 1
            self._query_session = onnxruntime.InferenceSession(
                loaded.source, sess_options=query_options, providers=providers
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
        self.graph = loaded.graph  # in the embedding cache's fingerprint
        self.query_batches_exact = loaded.batch_exact  # see batching.batching_dense_encoder
        # On CPU a query cost the same 27 ms of CPU in a batch of 8 as alone (AMD EPYC, AVX2), and
        # a shared call runs on one thread: 16 clients got 37 answers/s batched, 59 unbatched
        # (docs/benchmarks/exact-encoders.md). A GPU runs a batch in one pass, so it batches.
        self.query_batching_pays = loaded.batch_exact and device == "cuda"
        self.max_length = max_length
        self.device = device
        self.pooling = pooling
        self.query_prefix = query_prefix
        # A GPU wants whole batches; on CPU small runs were fastest. Batch company moves the
        # vectors of a graph that is not exact, so it runs one text at a time.
        on_cpu = device != "cuda"
        if not loaded.batch_exact:
            self.batch_size = 1
        else:
            self.batch_size = min(batch_size, CPU_DOCUMENT_BATCH_TEXTS) if on_cpu else batch_size
        self.max_batch_tokens = CPU_DOCUMENT_MAX_BATCH_TOKENS if on_cpu else None
        # One real run: a broken model fails at load time, not halfway through a build.
        self.dim = int(self._encode(["dimension probe"]).shape[1])

    def encode_documents(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> np.ndarray:
        return self._encode(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        session = self._session if query_encoding_alone() else self._query_session
        return self._encode([self.query_prefix + text for text in texts], session=session)

    def _encode(
        self, texts: Sequence[str], progress: ProgressCallback | None = None, session: Any = None
    ) -> np.ndarray:
        session = session or self._session
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        token_ids = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
        vectors: list[np.ndarray | None] = [None] * len(texts)
        done = 0
        lengths = [len(ids) for ids in token_ids]
        for batch in plan_batches(lengths, self.batch_size, same_length=False, max_batch_tokens=self.max_batch_tokens):
            pooled = self._run(session, [token_ids[i] for i in batch])
            for index, vector in zip(batch, pooled, strict=True):
                vectors[index] = vector
            done += len(batch)
            if progress is not None:
                progress(done, len(texts))
        return l2_normalise(np.stack(cast(list[np.ndarray], vectors)))  # every slot was filled above

    def _run(self, session: Any, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Pooled vectors of one batch, right-padded with the padding masked out."""
        feeds = padded_feeds(token_ids)
        output = session.run([self._output], {name: feeds[name] for name in self._inputs})[0]
        if output.ndim == 2:  # the export pools already
            return output
        if self.pooling == "cls":
            return output[:, 0]
        mask = feeds["attention_mask"][:, :, None].astype(output.dtype)
        return (output * mask).sum(axis=1) / mask.sum(axis=1)


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
                dequantize=resolved.dequantize,
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
