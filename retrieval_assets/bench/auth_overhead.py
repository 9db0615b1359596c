"""``retrieval-assets bench-auth``: what API keys add to ``POST /search`` latency.

Two apps over one ``SearchService`` (the same promoted version, models and open indexes), one with
keys and one without, each under uvicorn on loopback in this process. The load test's client
drives three arms at concurrency 1 in rotating rounds, so that drift (caches, other load) falls
on all alike; each arm's P50 is the median of its rounds' P50s:

* ``open``: no key, no tenant: every tenant is searched, unfiltered;
* ``open_tenant``: no key, naming the key's tenant: the same tenant filter a key applies;
* ``with_key``: the key, naming no tenant: its grant is the filter.

Authentication's cost is ``with_key`` - ``open_tenant`` (same search, same filter); what scoping
to a tenant costs the engines is ``open_tenant`` - ``open``, reported beside it.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from retrieval_assets.bench.loadtest import load_queries, run_level
from retrieval_assets.bench.report import emit_figures, tqdm_progress
from retrieval_assets.core.embed.base import ProgressCallback
from retrieval_assets.serving.auth import ApiKeys, new_key

TARGET_OVERHEAD_MS = 1.0


@contextmanager
def serve_in_thread(app: FastAPI, start_timeout_s: float = 300.0) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port (its lifespan runs); yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {url} did not start")
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def measure_auth_overhead(
    open_app: FastAPI,
    keyed_app: FastAPI,
    token: str,
    tenant: str,
    queries: Sequence[str],
    *,
    requests: int = 400,
    rounds: int = 4,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """P50 (and P95) of ``POST /search`` at concurrency 1 in each arm, ``requests`` per arm in
    ``rounds`` rotating rounds; the key must grant exactly one tenant."""
    if requests < rounds or rounds < 1:
        raise ValueError("need at least one round and one request per round")
    per_round = requests // rounds
    headers = {"Authorization": f"Bearer {token}"}
    rounds_by_arm: dict[str, list[dict[str, Any]]] = {"open": [], "open_tenant": [], "with_key": []}
    with serve_in_thread(open_app) as open_url, serve_in_thread(keyed_app) as keyed_url:
        # The keyed server refuses a request without the key: the comparison is of the real thing.
        refused = httpx.post(f"{keyed_url}/search", json={"query": queries[0]}, timeout=30.0).status_code
        if refused != 401:
            raise RuntimeError(f"the keyed server answered {refused} without a key, not 401")
        arms = {
            "open": (open_url, None, None),
            "open_tenant": (open_url, None, {"tenant": tenant}),
            "with_key": (keyed_url, headers, None),
        }
        done = 0
        for index in range(rounds):
            order = list(arms)[index % 3 :] + list(arms)[: index % 3]
            for arm in order:
                url, arm_headers, fields = arms[arm]
                level = run_level(url, 1, per_round, queries, headers=arm_headers, fields=fields)
                if level["errors"]:
                    raise RuntimeError(f"{arm}: {level['errors']} errors, e.g. {level['error_examples']}")
                rounds_by_arm[arm].append(level)
                done += per_round
                if progress is not None:
                    progress(done, per_round * rounds * len(arms))
    figures: dict[str, Any] = {"requests_per_arm": per_round * rounds, "rounds": rounds, "concurrency": 1}
    for arm, levels in rounds_by_arm.items():
        figures[f"p50_{arm}_ms"] = round(statistics.median(level["p50_ms"] for level in levels), 3)
        figures[f"p95_{arm}_ms"] = round(statistics.median(level["p95_ms"] for level in levels), 3)
        figures[f"rounds_{arm}"] = [{k: level[k] for k in ("p50_ms", "p95_ms", "throughput_rps")} for level in levels]
    overhead = figures["p50_with_key_ms"] - figures["p50_open_tenant_ms"]
    figures["p50_overhead_ms"] = round(overhead, 3)
    figures["p50_tenant_filter_ms"] = round(figures["p50_open_tenant_ms"] - figures["p50_open_ms"], 3)
    figures["target_overhead_ms"] = TARGET_OVERHEAD_MS
    figures["target_met"] = overhead <= TARGET_OVERHEAD_MS
    return figures


def bench_auth(requests: int, rounds: int, queries_file: str | None, json_out: str | None) -> int:
    """POST /search P50 at concurrency 1 without and with an API key, over the code location's
    promoted version; the last stdout line is the JSON figures (exit 1 when the overhead misses
    its target)."""
    from retrieval_assets.definitions import code_location_resource, configured_search
    from retrieval_assets.serving import create_app

    queries = load_queries(queries_file)
    catalog = code_location_resource("catalog")
    token, key = new_key("bench", [catalog.tenant_id], ["search"], requests_per_minute=10_000_000)
    with configured_search() as search:
        open_app, keyed_app = (
            create_app(search.service, catalog_format=catalog.format, default_tenant=catalog.tenant_id, keys=keys)
            for keys in (None, ApiKeys([key]))
        )
        figures = measure_auth_overhead(
            open_app,
            keyed_app,
            token,
            catalog.tenant_id,
            queries,
            requests=requests,
            rounds=rounds,
            progress=tqdm_progress("bench-auth"),
        )
    emit_figures(figures, json_out)
    return 0 if figures["target_met"] else 1
