"""``retrieval-assets serve``'s start-up policy: who may bind where, admission limits, a frozen heap,
one uvicorn process.

uvicorn runs in one process: the embedded Qdrant shard allows one open handle per process, and
requests share the retriever's threads.
"""

from __future__ import annotations

import gc
import sys

from retrieval_assets.core.ingest.catalog import CatalogFormat
from retrieval_assets.core.retrieval.service import UNAVAILABLE_ERRORS, SearchService
from retrieval_assets.serving.admission import AdmissionLimits
from retrieval_assets.serving.auth import ApiKeys, is_loopback


def api_keys_for(host: str) -> ApiKeys | None:
    """The configured API keys; without any, only a loopback ``host`` may be bound (ValueError
    otherwise: every caller would read and write every tenant)."""
    keys, source = ApiKeys.from_environment()
    if keys is None and not is_loopback(host):
        raise ValueError(
            f"refusing to bind {host} without API keys ({source}): every caller would read and write every "
            "tenant. Bind 127.0.0.1, or configure keys (retrieval-assets api-key create)."
        )
    if keys is None:
        print(f"serve: no API keys ({source}): serving {host} only, every local caller is trusted", file=sys.stderr)
    else:
        print(f"serve: {len(keys)} API keys from {source}; every route but /health needs one", file=sys.stderr)
    return keys


def run_server(
    service: SearchService,
    *,
    catalog_format: CatalogFormat,
    default_tenant: str,
    keys: ApiKeys | None,
    host: str,
    port: int,
    access_log: bool,
    search_concurrency: int | None,
    queue_depth: int,
) -> None:
    """Serve the HTTP API over ``service`` until interrupted (``search_concurrency`` None: one
    search per core, ``default_limits``)."""
    import uvicorn

    from retrieval_assets.serving.app import create_app, default_limits

    limits = AdmissionLimits(search_concurrency or default_limits().concurrency, queue_depth)
    app = create_app(service, catalog_format=catalog_format, default_tenant=default_tenant, keys=keys, limits=limits)
    _freeze_long_lived_heap(service)
    uvicorn.run(app, host=host, port=port, access_log=access_log)


def _freeze_long_lived_heap(service: SearchService) -> None:
    """Open the promoted version, then move everything alive (code, Dagster definitions, models,
    indexes: about 700k objects) out of the cyclic collector's sight. Every search allocates
    thousands of short-lived objects, and each collection they trigger rescanned that heap:
    1.2 ms of a search's CPU went to the collector, 0.3 ms once frozen (docs/benchmarks/http-load.md)."""
    try:
        service.retriever()
    except UNAVAILABLE_ERRORS:
        pass  # nothing promoted yet: the app says so on /health and opens the version later
    gc.collect()
    gc.freeze()
