"""The architecture the folder tree promises: a pure core, a serving layer that needs no Dagster
code location, and one code location that loads every definition."""

from __future__ import annotations

import ast
from pathlib import Path

import retrieval_assets

PACKAGE = Path(retrieval_assets.__file__).resolve().parent


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def _violations(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for module in sorted(_imported_modules(path))
        if module.split(".")[0] in forbidden or module.startswith(forbidden)
    ]


def test_core_imports_no_dagster_and_no_dagster_layer() -> None:
    assert _violations("core", ("dagster", "retrieval_assets.defs", "retrieval_assets.definitions")) == []


def test_serving_imports_no_dagster_layer() -> None:
    dagster_layer = ("retrieval_assets.defs", "retrieval_assets.definitions", "retrieval_assets.runs")
    assert _violations("serving", dagster_layer) == []


def test_the_checker_sees_an_import(tmp_path: Path) -> None:
    # A guard against a checker that finds nothing: a forbidden import must be reported.
    source = tmp_path / "example.py"
    source.write_text("from dagster import asset\nimport retrieval_assets.defs.jobs\n")
    assert _imported_modules(source) == {"dagster", "retrieval_assets.defs.jobs"}


def test_code_location_loads_every_definition() -> None:
    from retrieval_assets.definitions import defs

    defs.validate_loadable(defs)
    repository = defs.get_repository_def()
    assert {job.name for job in repository.get_all_jobs()} >= {
        "index_build_job",
        "evaluation_job",
        "document_update_job",
        "embedding_shards_job",
        "rollback_job",
        "run_retention_job",
    }
    assert {s.name for s in repository.schedule_defs} == {"nightly_index_build", "weekly_run_retention"}
    assert {s.name for s in repository.sensor_defs} == {
        "candidate_evaluation_sensor",
        "catalog_source_sensor",
        "document_inbox_sensor",
    }
    keys = {key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()}
    assert {"raw_catalog", "chunks", "index_version", "retrieval_evaluation", "promoted_index"} <= keys
