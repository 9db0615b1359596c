"""Serving: the HTTP API over the query resource (``http_api``), its API keys (``auth``), and a load test for it (``loadtest``).

Nothing here imports the Dagster layer: ``retrieval-assets serve`` (cli.py) hands ``create_app``
the configured search resource's ``Searcher``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so the load-test client does not import FastAPI and the models' stack.
    if name == "create_app":
        from retrieval_assets.serving.http_api import create_app

        return create_app
    raise AttributeError(name)
