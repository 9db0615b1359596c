"""Cross-encoder rerankers: the packaged ONNX ms-marco MiniLM (dequantised to exact fp32 at load
time, or its INT8 graph as shipped) and sentence-transformers models.

Reranking sits on the query path (top-20 candidates per query), so the ONNX adapter is tuned
for latency on a small shared CPU; bench_runs/rerank_speed.py measures the choices made here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval_assets.core.embed.dense import _ONNX_INPUTS, padded_feeds
from retrieval_assets.core.embed.device import onnx_providers, provider_device, resolve_device, usable_cores
from retrieval_assets.core.embed.onnx_graph import load_graph
from retrieval_assets.core.embed.packaged import load_resolved, resolve_for_role
from retrieval_assets.core.retrieval.rerank.base import Reranker

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

# BERT-style models have 512 learned positions; a longer input fails inside the model.
_DEFAULT_MODEL_MAX_LENGTH = 512

# On CPU, batching pays only while a run's activations stay small (in cache). SciFact top-20
# at max_length 256 (bench_runs/rerank_speed.py): two pairs per run were ~15% faster than one
# pair per run, and one padded run of all 20 was slowest, its P95 up to 2x worse when other
# processes loaded the cores; four pairs per run helped on an idle CPU but not on a loaded one.
# So a CPU run holds at most this many padded tokens; a GPU run is limited by batch_size alone.
CPU_MAX_BATCH_TOKENS = 512


def _model_max_length(model_dir: Path) -> int:
    """The tokenizer's ``model_max_length``, when its config gives a sane one."""
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("model_max_length")
        if isinstance(value, int) and 0 < value <= 8192:  # HF writes 1e30 for "unknown"
            return value
    return _DEFAULT_MODEL_MAX_LENGTH


def plan_pair_batches(
    token_ids: Sequence[Sequence[int]], batch_size: int, max_batch_tokens: int | None
) -> list[list[int]]:
    """Indices cut into runs of similar length, each within ``batch_size`` and the token budget.

    Ordering by (length, token ids) makes each batch depend on the set of pairs only, not on
    the order they came in: an INT8 graph run as shipped shifts a score with its batch
    company, so this keeps its scores identical for the same passages in any order (the
    default, dequantised graph scores each pair the same in any company). Length order also keeps
    padding small, since the last pair added is always the longest in its batch.
    """
    order = sorted(range(len(token_ids)), key=lambda i: (len(token_ids[i]), tuple(token_ids[i])))
    batches: list[list[int]] = []
    for index in order:
        current = batches[-1] if batches else None
        padded = (len(current) + 1) * len(token_ids[index]) if current else 0
        if (
            current is None
            or len(current) == batch_size
            or (max_batch_tokens is not None and padded > max_batch_tokens)
        ):
            batches.append([index])
        else:
            current.append(index)
    return batches


class OnnxCrossEncoder(Reranker):
    """A BERT-style cross-encoder ONNX export (one relevance logit per pair) run with onnxruntime.

    Pairs are tokenised with the model's ``tokenizer.json``; truncation is "longest_first",
    which with a short query and a long passage cuts only the passage, and still works when a
    query alone exceeds ``max_length`` (where "only_second" would fail).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        model_name: str | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        device: str = "cpu",
        intra_op_threads: int | None = None,
        max_batch_tokens: int | None = CPU_MAX_BATCH_TOKENS,
        allow_spinning: bool = False,
        dequantize: bool = True,
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        loaded = load_graph(model_dir / "model.onnx", dequantize)
        self.graph = loaded.graph
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = intra_op_threads or usable_cores()
        options.inter_op_num_threads = 1  # one query's pairs form a single chain of ops
        # onnxruntime's pool threads spin-wait between ops by default. On an idle CPU that was
        # ~15% faster here, but when other processes want the cores, spinning (even for 50 us)
        # made a top-20 rerank up to 2x slower and its P95 3x worse. Hosts are shared, so no.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
        providers = onnx_providers(device)
        self._session = onnxruntime.InferenceSession(loaded.source, sess_options=options, providers=providers)
        self._inputs = [i.name for i in self._session.get_inputs()]
        unsupported = set(self._inputs) - set(_ONNX_INPUTS)
        if unsupported:
            raise ValueError(f"ONNX model needs inputs this reranker cannot feed: {sorted(unsupported)}")
        self._output = self._session.get_outputs()[0].name
        self.max_length = min(max_length, _model_max_length(model_dir))
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_length, strategy="longest_first")
        self._tokenizer.no_padding()  # the packaged tokenizer.json pads every input to 512

        self.model_name = model_name or str(model_dir)
        self.device = provider_device(providers)
        self.batch_size = batch_size
        # A GPU wants whole batches; the token budget is a CPU cache effect.
        self.max_batch_tokens = max_batch_tokens if self.device == "cpu" else None
        # One real run: a broken model, or one that is not a single-logit cross-encoder (a
        # dense export gives (batch, tokens, dim)), fails at load time, not on the first query.
        probe = self._run(padded_feeds([[101, 102, 102]]))
        if probe.ndim != 2 or probe.shape[1] != 1:
            raise ValueError(
                f"expected one relevance logit per pair, got output {self._output!r} of shape {probe.shape}"
            )

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        encodings = self._tokenizer.encode_batch([(query, passage) for passage in passages])
        token_ids = [encoding.ids for encoding in encodings]
        scores = np.zeros(len(passages), dtype=np.float32)
        for batch in plan_pair_batches(token_ids, self.batch_size, self.max_batch_tokens):
            feeds = padded_feeds([token_ids[i] for i in batch], [encodings[i].type_ids for i in batch])
            scores[batch] = self._run(feeds)[:, 0]
        return scores

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self._session.run([self._output], {name: feeds[name] for name in self._inputs})[0])


class SentenceTransformerCrossEncoder(Reranker):
    """A sentence-transformers ``CrossEncoder`` from a local directory or a Hugging Face hub name.

    Scores are the raw logit (no sigmoid), like the ONNX adapter's, so either adapter of the
    same model gives comparable numbers.
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        model_name: str | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        device: str = "cpu",
        local_files_only: bool = False,
    ) -> None:
        import torch
        from sentence_transformers import CrossEncoder  # deferred: imports torch

        self._model: CrossEncoder = CrossEncoder(
            model_name_or_path,
            device=device,
            local_files_only=local_files_only,
            activation_fn=torch.nn.Identity(),
        )
        if self._model.num_labels != 1:
            raise ValueError(f"expected a single-logit cross-encoder, it has {self._model.num_labels} labels")
        # Never beyond what the model was set up for.
        self.max_length = min(max_length, self._model.max_seq_length or max_length)
        self._model.max_seq_length = self.max_length
        self.model_name = model_name or model_name_or_path
        self.device = device
        self.batch_size = batch_size

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        scores = self._model.predict(
            [(query, passage) for passage in passages],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(scores, dtype=np.float32).reshape(len(passages))


def load_reranker(
    name_or_path: str,
    *,
    device: str = "auto",
    max_length: int = 256,
    batch_size: int = 32,
    intra_op_threads: int | None = None,
) -> Reranker:
    """Load a cross-encoder by packaged name, local directory or Hugging Face hub name.

    ``intra_op_threads`` (ONNX only) defaults to the cores this process may use. Raises
    ModelLoadError, naming the model and how to provide it, when it cannot be loaded.
    """
    resolved = resolve_for_role(name_or_path, "cross_encoder", "cross-encoder")
    target = resolve_device(device)

    def load(local_files_only: bool) -> Reranker:
        if resolved.kind == "onnx":
            return OnnxCrossEncoder(
                resolved.path,
                model_name=name_or_path,
                max_length=max_length,
                batch_size=batch_size,
                device=target,
                intra_op_threads=intra_op_threads,
                dequantize=resolved.dequantize,
            )
        return SentenceTransformerCrossEncoder(
            resolved.path,
            model_name=name_or_path,
            max_length=max_length,
            batch_size=batch_size,
            device=target,
            local_files_only=local_files_only,
        )

    return load_resolved(resolved, load, role="cross_encoder")
