"""Inputs shared by the server adapters' tests: a chunk payload, field types, a filter spec, a secret."""

from __future__ import annotations

from typing import Any

from retrieval_assets.core.stores.remote import RetryPolicy

SECRET = "s3cret-Pa55"


FIELD_TYPES = {"license": "keyword", "tags": "keyword", "year": "integer", "stars": "float", "open_source": "bool"}


# Tenant + set + range + bool: what every query must carry in filter context.
FILTER_SPEC = {
    "tenant_id": "acme", "license": ["MIT", "GPL-3.0"], "year": {"gte": 2015.5, "lte": 2020}, "open_source": "true",
}


def payload(i: int, tenant: str = "acme", **extra: Any) -> dict[str, Any]:
    return {
        "doc_id": f"d{i}",
        "chunk_id": f"d{i}#0",
        "tenant_id": tenant,
        "section": "body",
        "title": f"Title {i}",
        "text": f"Text number {i}.",
        "license": "MIT",
        "tags": ["format:DICOM", "os:linux"],
        "year": 2018,
        "stars": 4.5,
        "open_source": True,
        **extra,
    }


FAST = RetryPolicy(max_retries=2, initial_backoff_s=0.0, sleep=lambda s: None)


def chunk(i: int) -> dict:
    return {"chunk_id": f"d{i}#0", "doc_id": f"d{i}", "tenant_id": "acme", "section": "body",
            "title": f"T{i}", "text": f"text {i}", "year": 2020}


def as_json(model: Any) -> Any:
    if isinstance(model, list):
        return [as_json(item) for item in model]
    return model.model_dump(mode="json", exclude_unset=True, exclude_none=True)
