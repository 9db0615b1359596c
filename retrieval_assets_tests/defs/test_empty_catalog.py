"""A catalog with nothing to index stops at cleaning, naming what it read, instead of failing in an index."""

from __future__ import annotations

from pathlib import Path

from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import build_index, deployment_resources


def test_an_empty_folder_fails_the_has_documents_check_and_builds_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    outcome = build_index(
        deployment_resources(tmp_path / "home", CatalogResource(format="files", path=str(tmp_path / "empty")))
    )
    assert not outcome.success and outcome.candidate is None
    [check] = [c for c in outcome.run.get_asset_check_evaluations() if c.check_name == "has_documents"]
    assert not check.passed and check.description == "0 documents to index (empty: 0 rows read; 0 quarantined)"
    # The run stopped at cleaning: no index step ran, so no index error stands in for the real one.
    failed = {event.step_key for event in outcome.run.all_events if event.is_step_failure}
    assert failed == {"cleaned_documents"}
