"""A three-tenant tool catalog, plus one posted document per tenant in the document inbox,
built once per test session through every Dagster asset.

The tenants hold near-copies of each other's tools (same descriptions, authors and years,
relations that point across tenants), so any filter that fails to apply shows up as a leak.
The build's search resource takes its LLM key from an ``EnvVar`` and calls a loopback
OpenAI-compatible endpoint during evaluation, so the secrets test can look for the key in
everything the build wrote. Used by the HTTP API, tenant isolation and secrets tests.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from dagster import DagsterInstance, EnvVar, materialize

from retrieval_assets.core.ingest.inbox import DocumentInbox, InboxEntry, InboxOperation
from retrieval_assets.definitions import ASSETS
from retrieval_assets.defs.io_manager import ParquetIOManager
from retrieval_assets.defs.jobs import WHOLE_BUILD
from retrieval_assets.defs.resources import (
    CatalogResource,
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
    MultiQueryConfig,
    RerankConfig,
    SearchResource,
    code_location_resources,
)
from retrieval_assets_tests import TEST_DATA

TOOLS = TEST_DATA / "tools_with_relations.jsonl"
TENANTS = ("alpha", "beta", "gamma")
SECRET_ENV = "RETRIEVAL_ASSETS_TEST_LLM_KEY"
SECRET = "sk-test-9f3c1e7a-do-not-log"
# Only gamma's imaging tools have a venue: "in <it>" is a filter for gamma and text for the others.
GAMMA_VENUE = "GammaImagingVenue"
AUTHORS = (["Heng Li", "Richard Durbin"], ["Ben Langmead", "Steven L. Salzberg"], ["John Smith", "Jane Doe"])
IMAGING = [
    (
        "horos",
        "Horos",
        "Free open-source medical image viewer for CT, MRI and PET studies with volume rendering.",
        "DICOM",
    ),
    ("itksnap", "ITK-SNAP", "Interactive software for semi-automatic segmentation of 3D medical images.", "NIfTI"),
    ("orthanc", "Orthanc", "Lightweight server that stores and serves medical images over the network.", "DICOM"),
]


def tenant_records() -> list[dict[str, Any]]:
    """alpha: the 18 bio.tools-style tools; beta: 8 of them again, relations half local, half
    pointing at alpha's ids; gamma: imaging tools (the only ones with a venue) plus 2 more copies.
    Every tenant has tools by Smith, from 2019 on and before, so NL filters keep results in every
    tenant."""
    base = [json.loads(line) for line in TOOLS.read_text().splitlines()]
    records = []
    for i, tool in enumerate(base):
        metadata = {
            **tool["metadata"], "year": 2010 + i % 14, "authors": AUTHORS[i % 3], "license": ["MIT", "GPL-3.0"][i % 2]
        }
        records.append({**tool, "tenant_id": "alpha", "metadata": metadata})
    for prefix, tenant, picks in (("beta", "beta", range(0, 16, 2)), ("gamma", "gamma", (0, 7))):
        for i in picks:
            tool = records[i]
            relations = {
                label: [f"{prefix}-{target}" for target in targets] + targets[:1]  # + one cross-tenant id
                for label, targets in tool.get("relations", {}).items()
            }
            records.append({**tool, "id": f"{prefix}-{tool['id']}", "tenant_id": tenant, "relations": relations})
    for i, (tool_id, name, description, fmt) in enumerate(IMAGING):
        metadata = {
            "topics": ["Medical imaging"], "formats": [fmt], "year": 2015 + 3 * i, "authors": AUTHORS[i],
            "venue": GAMMA_VENUE,
        }  # fmt: skip
        records.append(
            {"id": tool_id, "name": name, "description": description, "tenant_id": "gamma", "metadata": metadata}
        )
    return records


# Posted through the document inbox (POST /documents) rather than the catalog: one near-copy per
# tenant, so a posted document leaking across tenants shows up like a catalog one would.
POSTED_TEXT = "Posted aligner that maps long nanopore sequencing reads to a reference genome quickly."


def posted_entries() -> list[InboxEntry]:
    return [
        InboxEntry.new(
            InboxOperation.UPSERT,
            f"posted-{tenant}",
            tenant,
            format="tool_catalog",
            record={"id": f"posted-{tenant}", "name": f"Posted aligner {tenant}", "description": POSTED_TEXT},
        )
        for tenant in TENANTS
    ]


def tenant_of() -> dict[str, str]:
    """Every indexed document id (catalog and posted) and its tenant."""
    return {str(r["id"]): r["tenant_id"] for r in tenant_records()} | {e.doc_id: e.tenant_id for e in posted_entries()}


# Authorization headers the loopback LLM endpoint was sent, in order.
LLM_AUTHORIZATION: list[str] = []


def _chat_completions(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """A WSGI OpenAI-compatible endpoint: records the Authorization header, answers two paraphrases."""
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    LLM_AUTHORIZATION.append(environ.get("HTTP_AUTHORIZATION", ""))
    answer = {"choices": [{"message": {"content": "1. sequence alignment software\n2. genome read mapper"}}]}
    payload = json.dumps(answer).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()} {record.exc_text or ''}")


@dataclass
class TenantBuild:
    home: Path
    llm_url: str
    run_id: str
    instance: DagsterInstance
    success: bool
    python_log: list[str] = field(default_factory=list)  # every Python log record emitted during the build

    @property
    def llm_authorization(self) -> list[str]:
        return LLM_AUTHORIZATION

    def search_resource(self, **options: Any) -> SearchResource:
        """A fresh query resource over the built indexes (the build's own one is closed after the run)."""
        storage = IndexStorageResource(home=str(self.home))
        return SearchResource(storage=storage, models=ModelResource(), build=IndexBuildResource(), **options)


def _gold(root: Path) -> Path:
    gold = root / "gold"
    (gold / "qrels").mkdir(parents=True)
    queries = {"q1": "align sequencing reads to a reference genome", "q2": "medical image viewer"}
    (gold / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (gold / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tbwa\t1\nq2\thoros\t1\n")
    return gold


@cache
def build_tenant_indexes(root: Path) -> TenantBuild:
    """Materialize every asset over the three-tenant catalog under ``root`` (once per process)."""
    root.mkdir(parents=True, exist_ok=True)
    catalog = root / "catalog.jsonl"
    catalog.write_text("".join(json.dumps(record) + "\n" for record in tenant_records()))
    server = make_server("127.0.0.1", 0, _chat_completions, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()  # lives as long as the session
    llm_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    os.environ[SECRET_ENV] = SECRET

    home = root / "home"
    storage = IndexStorageResource(home=str(home))
    DocumentInbox(storage.inbox_dir).append(posted_entries())
    models = ModelResource()
    build = IndexBuildResource()
    search = SearchResource(
        storage=storage,
        models=models,
        build=build,
        multi_query=MultiQueryConfig(llm_base_url=llm_url),
        llm_api_key=EnvVar(SECRET_ENV),
        rerank=RerankConfig(candidates=5),
    )
    instance = DagsterInstance.ephemeral()
    collect = _Collect()
    root_logger = logging.getLogger()
    previous_level = root_logger.level
    root_logger.addHandler(collect)
    root_logger.setLevel(logging.DEBUG)
    try:
        result = materialize(
            ASSETS,
            selection=WHOLE_BUILD,
            instance=instance,
            resources={
                **code_location_resources(),
                "catalog": CatalogResource(
                    format="tool_catalog",
                    path=str(catalog),
                    gold_path=str(_gold(root)),
                    inbox_dir=str(storage.inbox_dir),
                ),
                "models": models,
                "storage": storage,
                "build": build,
                "search": search,
                "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
            },
        )
    finally:
        root_logger.removeHandler(collect)
        root_logger.setLevel(previous_level)
    return TenantBuild(
        home=home,
        llm_url=llm_url,
        run_id=result.run_id,
        instance=instance,
        success=result.success,
        python_log=collect.lines,
    )
