"""Delta builds through the build job on the real models: a small change to a promoted catalog is
built from a copy of the promoted version's indexes, and the version it seals holds the same
chunks and answers the same queries as a full build of the same catalog."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.index.build import backend_chunk_ids
from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.models import Strategy
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.defs.resources import DenseIndexConfig, IndexBuildResource, ModelResource
from retrieval_assets.paths import BUNDLED_DATA
from retrieval_assets.runs import materialized
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.defs.test_incremental_build import _tools, _write

# The sample is small, so a handful of changed documents is more than the default 5 %.
DELTA = IndexBuildResource(delta_max_changed_fraction=0.2)
PAPERS = 40
QUERIES = (
    "align sequencing reads to a reference genome",
    "variant calling from BAM files",
    "machine translation of English",
    "parsing sentences with a grammar",
    "nanopore long read assembly",
)
FILTERS = (None, {"year": {"gte": 1970}}, {"topics": "Genomics"}, {"venue": "earlymt"})
STRATEGIES = ([Strategy.DENSE], [Strategy.SPLADE], [Strategy.BM25], None)  # None: the default hybrid
TOP_K = 10


def _papers() -> list[dict]:
    """ACL papers as tool records, for metadata a filter can use (year, venue, authors)."""
    lines = (BUNDLED_DATA / "acl_sample" / "corpus.jsonl").read_text().splitlines()[:PAPERS]
    return [
        {
            "id": paper["_id"],
            "name": paper["title"],
            "description": paper["text"],
            "metadata": {"year": int(paper["year"]), "venue": paper["venue"], "authors": paper["authors"]},
        }
        for paper in map(json.loads, lines)
    ]


def _changed(records: list[dict]) -> list[dict]:
    """A changed text, a changed metadata value, a removed document (named by others' relations)
    and a new document."""
    changed = [json.loads(json.dumps(record)) for record in records[1:]]
    changed[0]["description"] += " It now also reads CRAM files."
    paper = next(record for record in changed if "metadata" in record and "year" in record["metadata"])
    paper["metadata"]["year"] = 2019
    added = {
        "id": "newtool",
        "name": "NewTool",
        "description": "Assembles long nanopore reads into contigs.",
        "metadata": {"topics": ["Genomics", "Sequence assembly"]},
        "relations": {"compatible_with": ["samtools"]},
    }
    return [*changed, added]


def _answers(layout: IndexLayout, models: ModelResource) -> dict[tuple, list[tuple[str, float]]]:
    retriever = open_retriever(
        layout,
        dense_encoder=models.dense_encoder(),
        sparse_encoder=models.sparse_encoder(),
        settings=RetrievalSettings(),
    )
    try:
        return {
            # One more than compared, to tell a tie at the cut-off (see _assert_same_hits).
            (query, json.dumps(filters), str(strategies)): [
                (hit.chunk_id, hit.score)
                for hit in retriever.search(query, top_k=TOP_K + 1, filters=filters, strategies=strategies).hits
            ]
            for query in QUERIES
            for filters in FILTERS
            for strategies in STRATEGIES
        }
    finally:
        retriever.close()


def _assert_same_hits(got: list[tuple[str, float]], expected: list[tuple[str, float]], request: tuple) -> None:
    """The same scores in the same order and the same hits, except that hits with equal scores
    may come in any order (BM25 quantises lengths, graph expansion halves scores: ties are
    common, and engines order them by internal position) and a tie at the cut-off may keep
    other members of the tie."""
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-5), request
    cut = expected[TOP_K][1] if len(expected) > TOP_K else None
    ties: dict[float, tuple[set[str], set[str]]] = {}
    for (got_id, _), (expected_id, score) in zip(got[:TOP_K], expected[:TOP_K], strict=True):
        if cut is None or abs(score - cut) > 1e-5:
            group = ties.setdefault(round(score, 5), (set(), set()))
            group[0].add(got_id), group[1].add(expected_id)
    for score, (got_ids, expected_ids) in ties.items():
        assert got_ids == expected_ids, (request, score)


# What only a delta's build manifests record: where it came from and how each index was changed.
DELTA_FACTS = ("base_version", "tombstones", "rebuilt_tenants", "patched_tenants", "deleted_in_statistics")


def _assert_same_version(
    delta: IndexVersion, full: IndexVersion, models: ModelResource, lexical_patched: bool = False
) -> None:
    """``lexical_patched``: the delta patched its tantivy index in place, whose BM25 statistics
    still count the documents it deleted, so BM25 (and hybrid) scores may differ a little and
    only the hits are compared, allowing a neighbour across the cut-off."""
    assert backend_chunk_ids(delta) == backend_chunk_ids(full)
    for index in ("faiss", "qdrant", "lexical"):
        manifest = read_build_manifest(getattr(delta.layout, index))
        built = {key: value for key, value in manifest.items() if key not in DELTA_FACTS}
        whole = read_build_manifest(getattr(full.layout, index))
        assert built == {key: value for key, value in whole.items() if key != "tombstones"}, index
    for table in ("vocabulary", "vocabulary_counts", "graph", "chunks"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(getattr(delta.layout, table)), pd.read_parquet(getattr(full.layout, table)), obj=table
        )
    delta_answers, full_answers = _answers(delta.layout, models), _answers(full.layout, models)
    assert any(delta_answers.values())
    for request, hits in full_answers.items():
        _, _, strategies = request
        if lexical_patched and strategies in (str(None), str([Strategy.BM25])):
            found = {chunk_id for chunk_id, _ in delta_answers[request][:TOP_K]}
            assert len(found & {chunk_id for chunk_id, _ in hits[:TOP_K]}) >= min(len(hits), TOP_K) - 1, request
        else:
            _assert_same_hits(delta_answers[request], hits, request)


def _delta_and_full(
    tmp_path: Path, build: IndexBuildResource, lexical_patched: bool = False
) -> tuple[Path, IndexVersion, IndexVersion, IndexVersion, Path]:
    """The changed catalog built as a delta from the promoted first one, and built in full in
    another home; checked to hold the same chunks and give the same answers."""
    records = [*_tools(), *_papers()]
    first = _write(tmp_path / "first.jsonl", records)
    second = _write(tmp_path / "second.jsonl", _changed(records))

    home = tmp_path / "home"
    _, served = build_catalog(home, first, build=build)
    IndexVersions(home / "indexes").promote(served, reason="test")
    outcome, delta = build_catalog(home, second, build=build)
    candidate = materialized(outcome.run, "index_candidate")
    assert outcome.candidate.base_version == served.id and candidate["mode"] == f"delta from {served.id}"
    # One text and one metadata value changed, one document added: 3 upserts; one removed.
    assert (candidate["upserted_chunks"], candidate["deleted_chunks"]) == (3, 1)
    assert delta.manifest()["base_version"] == served.id
    for asset in ("faiss_index", "qdrant_edge_index", "tantivy_index", "vocabulary"):
        assert materialized(outcome.run, asset)["mode"] == f"delta from {served.id}", asset
    # The UI says how the delta changed each tenant's lexical index (one tenant here).
    lexical = materialized(outcome.run, "tantivy_index")
    changed = ("none", "default", 3) if lexical_patched else ("default", "none", 0)
    assert (lexical["tenants_rebuilt"], lexical["tenants_patched"], lexical["deleted_in_statistics"]) == changed

    # The same catalog built in full in another home (its cache copied: vectors depend on text only).
    other = tmp_path / "other"
    shutil.copytree(home / "embedding_cache", other / "embedding_cache")
    full_outcome, full = build_catalog(other, second, build=build)
    assert full_outcome.candidate.mode == "full" and full_outcome.encoded["dense"] == 0
    assert "no promoted version" in full_outcome.candidate.build_reason
    assert full.id == delta.id
    _assert_same_version(delta, full, ModelResource(), lexical_patched)
    return first, served, delta, full, other


def test_small_change_is_a_delta_that_answers_as_a_full_build(tmp_path: Path) -> None:
    first, served, _, full, other = _delta_and_full(tmp_path, DELTA)
    assert read_build_manifest(full.layout.faiss)["index_type"] == "flat"

    # Above the threshold, the same change is built in full, with the reason.
    IndexVersions(other / "indexes").promote(full, reason="test")
    strict, again = build_catalog(other, first, build=IndexBuildResource(delta_max_changed_fraction=0.02))
    assert strict.candidate.mode == "full" and "above delta_max_changed_fraction" in strict.candidate.build_reason
    assert again.id == served.id and backend_chunk_ids(again) == backend_chunk_ids(served)


def test_a_delta_of_an_approximate_version_patches_its_indexes_and_finds_what_a_full_build_finds(
    tmp_path: Path,
) -> None:
    """With IVF (every version approximate here), the delta adds and removes vectors in the
    base's index instead of rebuilding it: the replaced and removed chunks are tombstones. Its
    tantivy index is the base's patched in place, counting the documents it deleted."""
    approximate = IndexBuildResource(  # type: ignore[call-arg]
        delta_max_changed_fraction=0.2, dense_index=DenseIndexConfig(approximate_from_chunks=0)
    )
    _, _, delta, full, _ = _delta_and_full(tmp_path, approximate, lexical_patched=True)
    lexical = read_build_manifest(delta.layout.lexical)
    assert (lexical["patched_tenants"], lexical["rebuilt_tenants"]) == (["default"], [])
    assert lexical["deleted_in_statistics"] == {"default": 3}
    assert read_build_manifest(delta.layout.faiss)["index_type"] == "ivf"
    # Two changed chunks were replaced and one removed; the new document's chunk is simply added.
    assert read_build_manifest(delta.layout.faiss)["tombstones"] == 3
    assert read_build_manifest(full.layout.faiss)["tombstones"] == 0
