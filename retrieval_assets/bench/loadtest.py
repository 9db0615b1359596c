"""``retrieval-assets loadtest``: drive ``POST /search`` at several concurrency levels and report figures.

Each level runs ``concurrency`` client threads, each with its own keep-alive connection; they send
``requests`` searches in all (query texts taken round-robin), stopping early after ``max_seconds``.
A few unmeasured warm-up requests come first at every level. Latency is client-side wall time per
request; an error is a transport failure or any status other than 200. Client and server share
the machine on loopback, so the figures include the client's own CPU use, which each level
reports per request beside the server's (from its ``GET /metrics``, when the key may read it).
The client is the standard library's ``http.client`` with request bodies encoded once: it took
about a third of httpx's CPU per request here (0.27 against 0.83-0.92 ms), CPU the server under
test would otherwise share with its load.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from retrieval_assets.bench.report import emit_figures, tqdm_progress
from retrieval_assets.core.embed.base import ProgressCallback

# Built-in queries: biomedical questions in the style of the bundled SciFact catalog.
SAMPLE_QUERIES = (
    "vitamin B12 deficiency and homocysteine",
    "statins reduce cardiovascular mortality",
    "insulin resistance in obese adolescents",
    "tumour suppressor p53 mutations in cancer",
    "antibiotic resistance in hospital infections",
    "gut microbiome and inflammatory bowel disease",
    "DNA methylation during embryonic development",
    "malaria vaccine efficacy in children",
    "mitochondrial dysfunction in neurodegeneration",
    "smoking cessation and lung function",
    "T cell exhaustion in chronic infection",
    "breast cancer screening with mammography",
    "stem cell differentiation into neurons",
    "blood pressure lowering and stroke risk",
    "HIV antiretroviral therapy adherence",
    "sleep deprivation effects on memory",
)
WARM_UP_REQUESTS = 3
# What the server's GET /metrics counts, reported per measured request: the process's CPU, and
# its query encoders' (summed over strategies).
SERVER_COUNTERS = {"cpu": "process_cpu_seconds_total", "encoder_cpu": "retrieval_encoder_cpu_seconds_total"}


class Connection:
    """One keep-alive HTTP/1.1 connection to the server at ``url`` (``http`` or ``https``, with an
    optional path prefix), reopened when the server closed it while it was idle."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._connection = connection_type(parts.hostname, parts.port, timeout=timeout_s)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", **(headers or {})}

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """The status and body of one exchange; a transport failure raises ``OSError`` or
        ``http.client.HTTPException`` and leaves the connection to be reopened."""
        if self._closed_by_server():
            self._connection.close()  # http.client opens a new one on the next request
        try:
            self._connection.request(method, self._prefix + path, body=body, headers=self._headers)
            response = self._connection.getresponse()
            return response.status, response.read()
        except BaseException:
            self._connection.close()  # a half-done exchange cannot be continued
            raise

    def connect(self) -> None:
        self._connection.connect()

    def close(self) -> None:
        self._connection.close()

    def _closed_by_server(self) -> bool:
        # An idle keep-alive socket has nothing to read until the server closes it (EOF).
        sock = self._connection.sock
        return sock is not None and bool(select.select([sock], [], [], 0)[0])


def server_counters(connection: Connection) -> dict[str, float]:
    """``SERVER_COUNTERS`` from the server's ``/metrics``: those it answers (none for an older
    server, or a key without the admin scope; no encoder's while no search has encoded)."""
    try:
        status, body = connection.request("GET", "/metrics")
    except (OSError, http.client.HTTPException):
        return {}
    if status != 200:
        return {}
    values: dict[str, float] = {}
    for line in body.decode().splitlines():
        name, _, value = line.partition(" ")
        for counter, metric in SERVER_COUNTERS.items():
            if name.partition("{")[0] == metric:
                values[counter] = values.get(counter, 0.0) + float(value)
    return values


def load_queries(path: str | Path | None) -> list[str]:
    """Query texts from a file (plain lines, or JSONL with ``text``/``query``), else the built-in sample."""
    if path is None:
        return list(SAMPLE_QUERIES)
    queries = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            record = json.loads(line)
            line = str(record.get("text") or record.get("query") or "").strip()
        if line:
            queries.append(line)
    if not queries:
        raise ValueError(f"{path} holds no query texts")
    return queries


def run_level(
    url: str,
    concurrency: int,
    requests: int,
    queries: Sequence[str],
    *,
    max_seconds: float = 60.0,
    top_k: int = 10,
    timeout_s: float = 30.0,
    progress: ProgressCallback | None = None,
    headers: dict[str, str] | None = None,
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Send ``requests`` searches from ``concurrency`` threads; throughput, latency percentiles, errors.
    ``fields`` go into every search body (a tenant, filters)."""
    bodies = itertools.cycle([json.dumps({"query": q, "top_k": top_k, **(fields or {})}).encode() for q in queries])
    lock = threading.Lock()  # guards the shared counters, lists and the (not thread-safe) cycle
    latencies_ms: list[float] = []
    errors: list[str] = []
    unsent = requests
    connections = [Connection(url, headers, timeout_s) for _ in range(concurrency)]

    def send(connection: Connection, body: bytes) -> tuple[float, str | None]:
        started = time.perf_counter()
        try:
            status, _ = connection.request("POST", "/search", body)
            error = None if status == 200 else f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"
        return (time.perf_counter() - started) * 1000, error

    def worker(connection: Connection) -> None:
        nonlocal unsent
        while time.perf_counter() < deadline:
            with lock:
                if unsent == 0:
                    return
                unsent -= 1
                body = next(bodies)
            elapsed, error = send(connection, body)
            with lock:
                latencies_ms.append(elapsed)
                if error:
                    errors.append(error)
                if progress is not None:
                    progress(len(latencies_ms), requests)

    try:
        for _ in range(min(WARM_UP_REQUESTS, requests)):
            send(connections[0], next(bodies))
        for connection in connections[1:]:
            try:
                connection.connect()  # so that no measured request waits for a TCP handshake
            except OSError:
                pass  # the worker's first request then reports the failure
        server_before = server_counters(connections[0])
        client_cpu_before = time.process_time()
        deadline = time.perf_counter() + max_seconds
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="loadtest") as pool:
            for future in [pool.submit(worker, connection) for connection in connections]:
                future.result()
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu_before
        server_after = server_counters(connections[0])
    finally:
        for connection in connections:
            connection.close()
    if progress is not None:
        progress(requests, requests)  # closes the bar when the time limit stopped the level early

    values = np.asarray(latencies_ms) if latencies_ms else np.zeros(1)
    completed = len(latencies_ms)
    per_request = {
        f"server_{name}_ms_per_request": round((server_after[name] - server_before[name]) * 1000 / completed, 3)
        if name in server_before and name in server_after and completed
        else None
        for name in SERVER_COUNTERS
    }
    return {
        "concurrency": concurrency,
        "requests": completed,
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "stopped_by_time_limit": completed < requests,
        "seconds": round(seconds, 3),
        "throughput_rps": round(completed / seconds, 2) if seconds > 0 else 0.0,
        "p50_ms": round(float(np.percentile(values, 50)), 2),
        "p95_ms": round(float(np.percentile(values, 95)), 2),
        "p99_ms": round(float(np.percentile(values, 99)), 2),
        "mean_ms": round(float(values.mean()), 2),
        **per_request,
        "client_cpu_ms_per_request": round(client_cpu * 1000 / completed, 3) if completed else None,
    }


def run_load_test(
    url: str,
    concurrency_levels: Sequence[int],
    requests: int,
    queries: Sequence[str],
    *,
    max_seconds: float = 60.0,
    top_k: int = 10,
    progress: Callable[[str], ProgressCallback] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Every level in turn; ``progress(label)`` gives each level its progress callback; ``headers``
    go with every request (an API key)."""
    if requests < 1 or not concurrency_levels or min(concurrency_levels) < 1:
        raise ValueError("requests and every concurrency level must be at least 1")
    levels = []
    for concurrency in concurrency_levels:
        callback = progress(f"concurrency {concurrency}") if progress else None
        levels.append(
            run_level(
                url,
                concurrency,
                requests,
                queries,
                max_seconds=max_seconds,
                top_k=top_k,
                progress=callback,
                headers=headers,
            )
        )
    baseline = levels[0]["p95_ms"]
    for level in levels:
        level["p95_vs_first_level"] = round(level["p95_ms"] / baseline, 2) if baseline else None
    return {
        "url": url,
        "requests_per_level": requests,
        "max_seconds_per_level": max_seconds,
        "top_k": top_k,
        "authenticated": bool(headers and "Authorization" in headers),
        "queries": len(queries),
        "warm_up_requests_per_level": min(WARM_UP_REQUESTS, requests),
        "levels": levels,
    }


CLIENT_KEY_ENV = "RETRIEVAL_ASSETS_API_KEY"  # the token loadtest and bench-document-flow send


def client_headers() -> dict[str, str]:
    """The API key a client command sends: ``RETRIEVAL_ASSETS_API_KEY`` (not an argument, so that
    it stays out of shell history and the process list)."""
    token = os.environ.get(CLIENT_KEY_ENV, "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def loadtest(
    url: str,
    concurrency: str,
    requests: int,
    queries_file: str | None,
    max_seconds: float,
    top_k: int,
    json_out: str | None,
) -> int:
    """POST /search at each of the comma-separated ``concurrency`` levels; the last stdout line
    is the JSON figures."""
    try:
        levels = [int(level) for level in concurrency.split(",")]
        figures = run_load_test(
            url,
            levels,
            requests,
            load_queries(queries_file),
            max_seconds=max_seconds,
            top_k=top_k,
            progress=tqdm_progress,
            headers=client_headers(),
        )
    except (OSError, ValueError) as exc:  # an unreadable query file, a bad level list
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    emit_figures(figures, json_out)
    return 0
