"""The remote dense encoder against a real OpenAI-compatible embedding server on loopback
(``retrieval_assets_tests/embedding_server.py``: the packaged all-MiniLM-L6-v2 behind
``POST /v1/embeddings``, in its own process): same vectors as the model in process, batching
and concurrency, retries, a down or dying server, the cache's fingerprint and bad answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from retrieval_assets.core.embed.base import DenseEncoder, ModelLoadError, encoder_fingerprint
from retrieval_assets.core.embed.cache import BlockEncoder, EmbeddingCache, encode_with_cache
from retrieval_assets.core.embed.configured import dense_encoder_for
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.remote import EmbeddingEndpointError, RemoteDenseEncoder, retry_after_s
from retrieval_assets.core.embed.vectors import dense_values
from retrieval_assets.core.settings import ModelSettings
from retrieval_assets.paths import DEFAULT_CATALOG
from retrieval_assets_tests.embedding_server import MODEL_NAME, EmbeddingServer, embedding_server
from retrieval_assets_tests.servers import free_port

SCIFACT = DEFAULT_CATALOG / "corpus.jsonl"  # the bundled SciFact sample


def _texts(n: int) -> list[str]:
    with SCIFACT.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for _, line in zip(range(n), lines, strict=False)]
    return [f"{row.get('title', '')}\n{row['text']}"[:600] for row in rows]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingServer]:
    with embedding_server() as running:
        yield running


@pytest.fixture(scope="module")
def local() -> DenseEncoder:
    return load_dense_encoder(MODEL_NAME, device="cpu")


def _remote(server: EmbeddingServer, **options: object) -> RemoteDenseEncoder:
    server.control()  # knobs reset before the probe
    options = {"backoff_s": 0.01, **options}
    return RemoteDenseEncoder(server.base_url, MODEL_NAME, **options)  # type: ignore[arg-type]


def test_vectors_match_the_in_process_encoder_of_the_same_model(server: EmbeddingServer, local: DenseEncoder) -> None:
    texts = _texts(12)
    remote = _remote(server, batch_size=4)
    assert remote.dim == local.dim == 384
    documents = remote.encode_documents(texts)
    assert documents.dtype == np.float32 and documents.shape == (12, 384)
    assert np.allclose(np.linalg.norm(documents, axis=1), 1.0, atol=1e-5)
    assert (documents * local.encode_documents(texts)).sum(axis=1).min() > 0.999
    queries = ["does vitamin D prevent fractures?", "BRCA1 and breast cancer"]
    assert (remote.encode_queries(queries) * local.encode_queries(queries)).sum(axis=1).min() > 0.999
    assert remote.encode_documents([]).shape == (0, 384)


def test_batches_and_concurrent_requests_give_the_vectors_of_one_text_at_a_time(server: EmbeddingServer) -> None:
    texts = _texts(23)
    one_by_one = _remote(server, batch_size=1, concurrency=1).encode_documents(texts)
    # The server lists each answer's items last first: vectors are placed by their "index".
    batched = _remote(server, batch_size=5, concurrency=3)
    server.control(reverse=True, delay_s=0.2)
    reports: list[tuple[int, int]] = []
    vectors = batched.encode_documents(texts, progress=lambda done, total: reports.append((done, total)))
    seen = server.stats()
    assert seen["requests"] == 5 and seen["texts"] == 23 and seen["max_batch"] == 5
    assert seen["max_in_flight"] > 1  # requests overlapped
    assert seen["max_in_flight"] <= 3
    assert np.abs(vectors - one_by_one).max() < 1e-5
    assert [done for done, _ in reports] == sorted(done for done, _ in reports) and reports[-1] == (23, 23)
    assert all(total == 23 for _, total in reports)


def test_429_and_5xx_are_retried_with_backoff_or_the_wait_retry_after_asks(server: EmbeddingServer) -> None:
    waits: list[float] = []
    remote = _remote(server, sleep=waits.append, retries=3)
    server.control(fail_next=2, fail_status=429, retry_after=7)
    assert remote.encode_documents(["a text"]).shape == (1, 384)
    assert waits == [7.0, 7.0] and server.stats()["failed"] == 2

    waits.clear()
    server.control(fail_next=3, fail_status=503)
    assert remote.encode_documents(["a text"]).shape == (1, 384)
    assert waits == [0.01, 0.02, 0.04]  # exponential backoff from backoff_s

    for status in (500, 502, 504):
        waits.clear()
        server.control(fail_next=1, fail_status=status)
        assert remote.encode_documents(["a text"]).shape == (1, 384) and waits == [0.01]

    waits.clear()
    server.control(fail_next=10, fail_status=500)
    with pytest.raises(EmbeddingEndpointError, match=r"/v1/embeddings failed after 4 attempts: HTTP 500"):
        remote.encode_documents(["a text"])
    assert server.stats()["failed"] == 4


def test_a_timed_out_request_is_retried(server: EmbeddingServer) -> None:
    waits: list[float] = []
    remote = _remote(server, sleep=waits.append, retries=1, timeout_s=0.3)
    server.control(delay_s=0.6)
    with pytest.raises(EmbeddingEndpointError, match=r"failed after 2 attempts: ReadTimeout"):
        remote.encode_documents(["a text"])
    assert waits == [0.01]


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_s("3") == 3.0 and retry_after_s(None) is None and retry_after_s("soon") is None
    assert retry_after_s("100000") == 60.0  # capped
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: no wait


def test_a_refused_request_is_not_retried_and_the_key_is_sent_but_never_shown(server: EmbeddingServer) -> None:
    server.control(api_key="sekrit-key")
    remote = RemoteDenseEncoder(server.base_url, MODEL_NAME, api_key="sekrit-key", backoff_s=0.01)
    assert remote.encode_documents(["a text"]).shape == (1, 384)
    waits: list[float] = []
    with pytest.raises(EmbeddingEndpointError, match="refused the request: HTTP 401") as refused:
        RemoteDenseEncoder(server.base_url, MODEL_NAME, api_key="wrong-key", sleep=waits.append)
    assert waits == []  # not retried
    server.control(served=[MODEL_NAME])  # dense_model is the name sent
    assert RemoteDenseEncoder(server.base_url, MODEL_NAME).dim == 384
    with pytest.raises(EmbeddingEndpointError, match="refused the request: HTTP 404.*another/model does not exist"):
        RemoteDenseEncoder(server.base_url, "another/model", sleep=waits.append)
    assert waits == []
    assert server.base_url in str(refused.value)
    assert "wrong-key" not in str(refused.value) and "sekrit" not in str(refused.value)
    assert isinstance(refused.value, ModelLoadError)


def test_a_down_endpoint_fails_at_load_naming_it(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(
        ModelLoadError, match=rf"embedding endpoint {url}/embeddings failed after 3 attempts: ConnectError"
    ):
        RemoteDenseEncoder(url, MODEL_NAME, retries=2, backoff_s=0.01)
    settings = ModelSettings(dense_model=MODEL_NAME, dense_endpoint=url, dense_endpoint_retries=0)
    with pytest.raises(ModelLoadError, match=url):
        dense_encoder_for(settings)


def test_the_fingerprint_names_the_endpoint_and_the_model(server: EmbeddingServer, local: DenseEncoder) -> None:
    remote = _remote(server)
    elsewhere = RemoteDenseEncoder(server.base_url.replace("127.0.0.1", "localhost"), MODEL_NAME)
    other_model = RemoteDenseEncoder(server.base_url, "another/model")
    fingerprints = {encoder_fingerprint(e) for e in (remote, elsewhere, other_model, local)}
    assert len(fingerprints) == 4
    assert encoder_fingerprint(remote) == (
        f"RemoteDenseEncoder|{MODEL_NAME}|dim=384|endpoint={server.base_url}/embeddings"
    )
    assert encoder_fingerprint(remote) == encoder_fingerprint(_remote(server, batch_size=3, concurrency=1))


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        ("nan", r"returned a vector with NaN or infinite values for text 2$"),
        ("inf", r"returned a vector with NaN or infinite values for text 2$"),
        ("dim", r"returned a vector of shape \(383,\) for text 2, expected \(384,\)"),
        ("count", r"returned 2 vectors \(indices \[0, 1\]\) for 3 texts"),
        ("index", r"returned 3 vectors \(indices \[0, 1\]\) for 3 texts"),
    ],
)
def test_bad_answers_are_clear_errors_naming_the_endpoint(server: EmbeddingServer, corrupt: str, message: str) -> None:
    remote = _remote(server, batch_size=3, concurrency=1)
    server.control(corrupt=corrupt)
    with pytest.raises(EmbeddingEndpointError, match=message) as bad:
        remote.encode_documents(_texts(7))
    assert f"embedding endpoint {server.base_url}/embeddings" in str(bad.value)


def test_a_configured_dimension_is_checked_at_load(server: EmbeddingServer) -> None:
    server.control()
    with pytest.raises(EmbeddingEndpointError, match=r"shape \(384,\) for text 0, expected \(768,\)"):
        RemoteDenseEncoder(server.base_url, MODEL_NAME, dim=768)


def test_queries_take_the_prefix_or_a_local_model_of_the_same_name(server: EmbeddingServer) -> None:
    remote = _remote(server, query_prefix="query: ")
    assert np.array_equal(remote.encode_queries(["fractures"]), remote.encode_documents(["query: fractures"]))
    settings = ModelSettings(
        dense_model=MODEL_NAME, dense_endpoint=server.base_url, dense_endpoint_query_model=MODEL_NAME, device="cpu"
    )
    configured = dense_encoder_for(settings)
    server.control()
    local_queries = configured.encode_queries(["fractures", "BRCA1"])
    assert server.stats()["requests"] == 0  # encoded in process
    assert (local_queries * remote.encode_documents(["fractures", "BRCA1"])).sum(axis=1).min() > 0.999


def _encode_block(encoder: DenseEncoder) -> BlockEncoder:
    # What embed_dense hands encode_with_cache (core/embed/steps.py).
    return lambda texts, report: dense_values(np.asarray(encoder.encode_documents(texts, progress=report)))


def test_a_server_dying_mid_build_fails_naming_it_and_the_rerun_resumes_from_the_cache(tmp_path: Path) -> None:
    texts = _texts(40)
    keys = [f"key-{n}" for n in range(40)]
    port = free_port()
    options = {"batch_size": 4, "concurrency": 1, "retries": 2, "backoff_s": 0.05}
    with embedding_server(port) as dying:
        encoder = RemoteDenseEncoder(dying.base_url, MODEL_NAME, **options)  # type: ignore[arg-type]
        cache = EmbeddingCache(tmp_path, encoder_fingerprint(encoder))
        dying.control(die_after=5)  # blocks of 8 texts: two written, the third dies in its 2nd request
        with pytest.raises(EmbeddingEndpointError, match=rf"embedding endpoint {dying.base_url}/embeddings failed"):
            encode_with_cache(keys, texts, _encode_block(encoder), cache, block_rows=8)
        assert dying.process.wait(timeout=10) != 0
    assert len(cache.lookup(keys)) == 16

    with embedding_server(port) as again:  # the same URL: the same fingerprint and cache
        encoder = RemoteDenseEncoder(again.base_url, MODEL_NAME, **options)  # type: ignore[arg-type]
        assert encoder_fingerprint(encoder) == cache.fingerprint
        again.control()
        rows, stats = encode_with_cache(keys, texts, _encode_block(encoder), cache, block_rows=8)
        assert (stats.reused, stats.encoded) == (16, 24)
        assert again.stats()["texts"] == 24  # only what the cache lacked went to the server
        fresh = encoder.encode_documents(texts)
    resumed = np.stack(rows["embedding"].to_list())
    assert rows["content_hash"].tolist() == keys
    assert np.abs(resumed - fresh).max() < 1e-5


def test_the_code_location_binds_the_key_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster import EnvVar, build_resources

    from retrieval_assets.defs.resources import ModelResource, code_location_resources

    monkeypatch.delenv("RETRIEVAL_EMBEDDING_API_KEY", raising=False)
    assert code_location_resources()["models"].dense_endpoint_api_key is None  # type: ignore[attr-defined]
    monkeypatch.setenv("RETRIEVAL_EMBEDDING_API_KEY", "from-the-environment")
    models = code_location_resources()["models"]
    assert isinstance(models, ModelResource)
    assert models.dense_endpoint_api_key == EnvVar("RETRIEVAL_EMBEDDING_API_KEY")  # its name, not its value
    with build_resources({"models": models}) as built:  # as a run resolves it
        assert built.models.dense_endpoint_api_key == "from-the-environment"
    # The key never reaches the settings the encoders are loaded (and cached) by.
    assert "dense_endpoint_api_key" not in ModelResource(dense_endpoint_api_key="k").settings().model_dump()
