"""Dense vectors from an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, TEI, Infinity,
Ollama, OpenAI).

Texts go out in requests of ``batch_size``, at most ``concurrency`` at a time. A request that
gets 429 or 5xx, times out or cannot connect is retried with exponential backoff (a
``Retry-After`` header, when sent, sets the wait); any other answer fails at once. Each answer
is checked before it is used: one vector per text, placed by its ``index`` field, every vector
of the same dimension and finite. Vectors are L2-normalised here, whatever the server does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder, ModelLoadError, ProgressCallback
from retrieval_assets.core.embed.vectors import l2_normalise

# Statuses worth another try: rate limited, or the server is (for now) unwell.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# A Retry-After longer than this is cut to it, so a misconfigured server cannot stall a build.
MAX_RETRY_AFTER_S = 60.0
PROBE_TEXT = "dimension probe"


class EmbeddingEndpointError(ModelLoadError):
    """The embedding endpoint could not be reached, refused, or answered something unusable;
    the message names the endpoint (never the key)."""


def embeddings_url(base_url: str) -> str:
    """``{base_url}/embeddings``: the base URL is the API root, as OpenAI clients take it
    (``http://host:8000/v1``)."""
    return base_url.rstrip("/") + "/embeddings"


def retry_after_s(header: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), capped."""
    if not header:
        return None
    try:
        seconds = float(header)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(header).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class RemoteDenseEncoder(DenseEncoder):
    """A dense encoder served over HTTP by an OpenAI-compatible embeddings endpoint.

    ``model_name`` is the model the endpoint serves (sent as ``model``); ``endpoint`` (the
    embeddings URL) is in the embedding cache's fingerprint beside it, so switching server or
    model never reuses vectors. One probe request at construction learns the dimension (or
    checks ``dim``) so a down or wrong endpoint fails at load time. Queries go to the same
    endpoint with ``query_prefix`` prepended, or to ``query_encoder`` (a local model of the same
    name and dimension) when given.
    """

    # The server decides its own batch company (TEI and vLLM batch concurrent requests), so
    # client-side micro-batching of queries could not make vectors any more reproducible.
    query_batches_exact = False

    def __init__(
        self,
        base_url: str,
        model_name: str,
        *,
        api_key: str | None = None,
        batch_size: int = 32,
        concurrency: int = 2,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 0.5,
        dim: int | None = None,
        query_prefix: str = "",
        query_encoder: DenseEncoder | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_size < 1 or concurrency < 1 or retries < 0:
            raise ValueError("batch_size and concurrency must be at least 1, retries at least 0")
        self.endpoint = embeddings_url(base_url)
        self.model_name = model_name
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.query_prefix = query_prefix
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._expected_dim = dim
        probe = self._request([PROBE_TEXT], offset=0)
        self.dim = int(probe.shape[1])
        if query_encoder is not None and query_encoder.dim != self.dim:
            raise ModelLoadError(
                f"the query encoder {query_encoder.model_name!r} makes {query_encoder.dim}-d vectors, "
                f"the embedding endpoint {self.endpoint} {self.dim}-d ones"
            )
        self._query_encoder = query_encoder

    def close(self) -> None:
        self._client.close()

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        return self._encode(texts, progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self._query_encoder is not None:
            return self._query_encoder.encode_queries(texts)
        return self._encode([self.query_prefix + text for text in texts])

    def _encode(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), self.batch_size)
        done = 0
        if self.concurrency == 1 or len(starts) == 1:
            for start in starts:
                batch = texts[start : start + self.batch_size]
                vectors[start : start + len(batch)] = self._request(batch, offset=start)
                done += len(batch)
                if progress is not None:
                    progress(done, len(texts))
            return vectors
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="embeddings") as pool:
            pending: dict[Future[np.ndarray], int] = {
                pool.submit(self._request, texts[start : start + self.batch_size], start): start for start in starts
            }
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
                    for future in finished:
                        start = pending.pop(future)
                        batch_vectors = future.result()  # raises the first failure
                        vectors[start : start + len(batch_vectors)] = batch_vectors
                        done += len(batch_vectors)
                        if progress is not None:
                            progress(done, len(texts))
            finally:
                for future in pending:
                    future.cancel()  # those not started yet; running requests end by their timeout
        return vectors

    def _request(self, texts: Sequence[str], offset: int) -> np.ndarray:
        """L2-normalised vectors of one request's texts; ``offset`` is the first text's position
        in the caller's list, for error messages."""
        body = {"model": self.model_name, "input": list(texts), "encoding_format": "float"}
        last_failure = ""
        for attempt in range(self.retries + 1):
            wait_s = self.backoff_s * 2**attempt
            try:
                response = self._client.post(self.endpoint, json=body)
            except httpx.TransportError as exc:  # refused, reset, timed out
                last_failure = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._vectors(response, len(texts), offset)
                last_failure = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in RETRY_STATUSES:
                    raise EmbeddingEndpointError(
                        f"embedding endpoint {self.endpoint} refused the request: {last_failure}"
                    )
                asked = retry_after_s(response.headers.get("retry-after"))
                wait_s = asked if asked is not None else wait_s
            if attempt < self.retries:
                self._sleep(wait_s)
        raise EmbeddingEndpointError(
            f"embedding endpoint {self.endpoint} failed after {self.retries + 1} attempts: {last_failure}"
        )

    def _vectors(self, response: httpx.Response, count: int, offset: int) -> np.ndarray:
        def bad(reason: str) -> EmbeddingEndpointError:
            return EmbeddingEndpointError(f"embedding endpoint {self.endpoint} {reason}")

        try:
            data: list[dict[str, Any]] = response.json()["data"]
            rows = {int(item["index"]): item["embedding"] for item in data}
        except (ValueError, KeyError, TypeError) as exc:
            raise bad(f"answered with no OpenAI embeddings list ({type(exc).__name__}: {exc})") from None
        if len(data) != count or sorted(rows) != list(range(count)):
            raise bad(f"returned {len(data)} vectors (indices {sorted(rows)[:10]}) for {count} texts")
        expected = self._expected_dim
        vectors = []
        for index in range(count):
            position = offset + index
            try:
                vector = np.asarray(rows[index], dtype=np.float32)
            except (ValueError, TypeError):
                raise bad(f"returned a vector that is not a list of numbers for text {position}") from None
            if vector.ndim != 1 or (expected is not None and vector.shape[0] != expected):
                raise bad(f"returned a vector of shape {vector.shape} for text {position}, expected ({expected},)")
            expected = vector.shape[0]
            if not np.isfinite(vector).all():
                raise bad(f"returned a vector with NaN or infinite values for text {position}")
            vectors.append(vector)
        if self._expected_dim is None:
            self._expected_dim = expected
        return l2_normalise(np.stack(vectors))
