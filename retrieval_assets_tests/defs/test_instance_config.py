"""Both instance configs (local and the compose stack's) are valid for this Dagster and keep the
promises docs/operations.md makes: failed runs are retried from failure, and one run at a time writes
into the index_writes pool."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster._core.instance.config import dagster_instance_config

from retrieval_assets.definitions import defs
from retrieval_assets.paths import PROJECT_ROOT

INDEX_WRITERS = {"vocabulary", "knowledge_graph", "faiss_index", "qdrant_edge_index", "tantivy_index",
                 "server_indexes", "index_version", "promoted_index"}


@pytest.mark.parametrize("config", ["dagster.yaml", "docker/dagster.yaml"])
def test_instance_config_retries_and_pools(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, "unused")
    shutil.copy(PROJECT_ROOT / config, tmp_path / "dagster.yaml")
    settings, _ = dagster_instance_config(str(tmp_path))
    assert settings["run_retries"] == {"enabled": True, "max_retries": 1, "retry_on_asset_or_op_failure": True}
    assert settings["concurrency"]["pools"]["default_limit"] == 1


def test_index_writers_share_one_pool() -> None:
    pools = {}
    for job_name in ("index_build_job", "evaluation_job"):
        pools |= {node.name: node.definition.pool for node in defs.resolve_job_def(job_name).graph.node_dict.values()}
    assert {name for name, pool in pools.items() if pool == "index_writes"} == INDEX_WRITERS
