"""Running the HTTP API over the code location's configured resources."""

from __future__ import annotations


def serve(host: str = "127.0.0.1", port: int = 8000, *, access_log: bool = True) -> None:
    """Serve ``definitions.defs``' search resource with uvicorn, one process (the embedded Qdrant
    shard allows one open handle per process; requests share the retriever's threads)."""
    import uvicorn

    from retrieval_assets.definitions import configured_search, defs
    from retrieval_assets.serving.http_api import create_app

    catalog = defs.resources["catalog"]
    with configured_search() as search:
        app = create_app(search, catalog_format=catalog.format, default_tenant=catalog.tenant_id)
        uvicorn.run(app, host=host, port=port, access_log=access_log)
