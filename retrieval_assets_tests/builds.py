"""Builds for tests, through the product's own build job (``retrieval_assets.runs``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import BuildOutcome, build_index, deployment_resources

# Run config of an evaluation that measures the default configuration only: the one the gate
# judges (the others rerank every gold query, which a test of the flow around them never reads).
GATE_ONLY = {"ops": {"retrieval_evaluation": {"config": {"configurations": []}}}}

def build_catalog(
    home: Path, catalog: Path, catalog_format: str = "tool_catalog", **overrides: Any
) -> tuple[BuildOutcome, IndexVersion]:
    """Build ``catalog`` under ``home`` as ``index_build_job`` does; the sealed version it wrote."""
    resources = deployment_resources(home, CatalogResource(format=catalog_format, path=str(catalog)), **overrides)
    outcome = build_index(resources)
    assert outcome.success and outcome.candidate is not None and outcome.candidate.sealed, outcome.run.run_id
    return outcome, IndexVersions(Path(home) / "indexes").version(outcome.candidate.version)
