"""``retrieval-assets loadtest``: drive ``POST /search`` at several concurrency levels and report figures.

Each level runs ``concurrency`` client threads sharing one keep-alive connection pool; they send
``requests`` searches in all (query texts taken round-robin), stopping early after ``max_seconds``.
A few unmeasured warm-up requests come first at every level. Latency is client-side wall time per
request; an error is a transport failure or any status other than 200. Client and server share
the machine on loopback, so the figures include the client's own CPU use, which each level
reports per request beside the server's (from its ``GET /metrics``, when the key may read it).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

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


def server_counters(client: httpx.Client, url: str) -> dict[str, float]:
    """``SERVER_COUNTERS`` from the server's ``/metrics``: those it answers (none for an older
    server, or a key without the admin scope; no encoder's while no search has encoded)."""
    try:
        response = client.get(url.rstrip("/") + "/metrics")
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    values: dict[str, float] = {}
    for line in response.text.splitlines():
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
    endpoint = url.rstrip("/") + "/search"
    bodies = itertools.cycle([{"query": q, "top_k": top_k, **(fields or {})} for q in queries])
    lock = threading.Lock()  # guards the shared counters, lists and the (not thread-safe) cycle
    latencies_ms: list[float] = []
    errors: list[str] = []
    unsent = requests
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(timeout=timeout_s, limits=limits, headers=headers) as client:

        def send(body: dict[str, Any]) -> tuple[float, str | None]:
            started = time.perf_counter()
            try:
                response = client.post(endpoint, json=body)
                error = None if response.status_code == 200 else f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            return (time.perf_counter() - started) * 1000, error

        for _ in range(min(WARM_UP_REQUESTS, requests)):
            send(next(bodies))
        server_before = server_counters(client, url)
        client_cpu_before = time.process_time()
        deadline = time.perf_counter() + max_seconds

        def worker() -> None:
            nonlocal unsent
            while time.perf_counter() < deadline:
                with lock:
                    if unsent == 0:
                        return
                    unsent -= 1
                    body = next(bodies)
                elapsed, error = send(body)
                with lock:
                    latencies_ms.append(elapsed)
                    if error:
                        errors.append(error)
                    if progress is not None:
                        progress(len(latencies_ms), requests)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="loadtest") as pool:
            for future in [pool.submit(worker) for _ in range(concurrency)]:
                future.result()
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu_before
        server_after = server_counters(client, url)
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
