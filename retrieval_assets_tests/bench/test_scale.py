"""``retrieval-assets bench-scale`` on the bundled ACL sample: a grown version built through the
build job from seeded vectors (nothing encoded), served, and changed by one document and by 1 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_assets.cli import main
from retrieval_assets.paths import BUNDLED_DATA

CONTRACT = {
    "chunks",
    "build_seconds",
    "build_peak_rss_mb",
    "serving_rss_mb",
    "dense_p95_ms",
    "hybrid_p95_ms",
    "recall_at_10",
    "recall_at_10_filtered",
    "one_document_seconds",
    "delta_one_percent_seconds",
}


def test_bench_scale_builds_a_grown_approximate_version_and_prints_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench-scale", "--dataset", str(BUNDLED_DATA / "acl_sample"), "--chunks", "300"]
    # HNSW from 100 chunks, so the approximate index, its tombstones and its recall are measured.
    args += ["--base-documents", "15", "--queries", "5", "--approximate-from-chunks", "100"]
    assert main([*args, "--workdir", str(tmp_path), "--json-out", str(tmp_path / "figures.json")]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert CONTRACT <= set(figures)
    assert figures == {**json.loads((tmp_path / "figures.json").read_text())}
    assert figures["chunks"] >= 300 and figures["dense_index"] == "ivf" and figures["base_documents"] == 15
    # Every grown chunk's vectors were seeded from the base's: the build encoded no chunk.
    assert (figures["build_encoded"]["dense"], figures["build_encoded"]["sparse"]) == (0, 0)
    assert figures["filtered_share"] == pytest.approx(0.1, abs=0.02)
    assert figures["recall_at_10"] >= 0.9 and figures["recall_at_10_filtered"] >= 0.9
    # One changed title is one re-encoded chunk; the 1 % were seeded like the grown ones.
    assert figures["one_document_mode"].startswith("delta from") and figures["one_document_encoded"]["dense"] == 1
    assert figures["delta_one_percent_mode"].startswith("delta from")
    assert figures["delta_one_percent_encoded"]["dense"] == 0 and figures["delta_one_percent_documents"] >= 1
    assert 0 < figures["build_peak_rss_mb"] and 0 < figures["serving_rss_mb"]
    # Five other base titles were searched before the timed ones.
    assert figures["warmup_queries"] == 5
    assert figures["machine"]["cores"] >= 1
