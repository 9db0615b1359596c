"""Serving: the HTTP API over the query resource (``app``, its ``routes``), its API keys (``auth``),
and ``serve``'s start-up (``server``).

Nothing here imports the Dagster layer: ``retrieval-assets serve`` (cli.py) hands ``create_app``
the configured search resource's ``SearchService``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing serving (auth's key files, say) does not load the models' stack.
    if name == "create_app":
        from retrieval_assets.serving.app import create_app

        return create_app
    raise AttributeError(name)
