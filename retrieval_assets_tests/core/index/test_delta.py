"""Delta planning and eligibility on real stores (seeded vectors, no models): what changed, and
when a candidate must be built in full instead, with the reason; the vocabulary counts a delta
updates; pruning never removes the version an unfinished delta copies from."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval_assets.core.index import delta as delta_module
from retrieval_assets.core.index.build import (
    backend_chunk_ids,
    build_faiss_index,
    build_fingerprint,
    build_lexical_index,
    build_qdrant_index,
    candidate_fingerprints,
    chunk_table,
    index_payloads,
    record_candidate_chunks,
    seal_candidate,
    settings_fingerprint,
)
from retrieval_assets.core.index.delta import (
    Delta,
    decide_build,
    delta_faiss_index,
    delta_held_chunk_ids,
    delta_lexical_index,
    delta_qdrant_index,
    delta_term_counts,
    record_decision,
)
from retrieval_assets.core.index.facets import FACET_COUNTS_FILE, FacetCounts
from retrieval_assets.core.index.layout import read_build_manifest, write_build_manifest
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.index.vocabulary import chunk_texts, count_terms
from retrieval_assets.core.io.parted import PartedTable, table_path
from retrieval_assets.core.io.tables import chunks_to_frame, write_parquet
from retrieval_assets.core.models import Chunk
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import DenseIndexSettings, VocabularySettings
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore

SETTINGS = "settings-1"
DOCUMENTS = 20


def _chunks(
    overrides: dict[str, dict] | None = None,
    drop: tuple[str, ...] = (),
    add: int = 0,
    *,
    legacy_ids: bool = False,
    beta_every: int = 0,
) -> pd.DataFrame:
    """One chunk per document with a year and topics; ``overrides`` replace a document's fields.
    ``legacy_ids``: chunk ids as versions built before ids named their tenant had them;
    ``beta_every``: every so many documents (d0 first) belong to tenant "beta"."""
    chunks = []
    for n in range(DOCUMENTS + add):
        doc_id = f"d{n}"
        if doc_id in drop:
            continue
        tenant = "beta" if beta_every and n % beta_every == 0 else "default"
        fields = {
            "tenant_id": tenant,
            "title": f"Tool {n}",
            "text": f"Aligns reads number {n} against genomes with seeds and {'variants' if n % 2 else 'assembly'}.",
            "metadata": {
                "year": 2000 + n,
                "topics": ["Genomics"] if n % 3 else ["Proteomics"],
                "keywords": [f"kw {n % 4}"],
            },
            **(overrides or {}).get(doc_id, {}),
        }
        chunks.append(
            Chunk(
                chunk_id=f"{doc_id}#0" if legacy_ids else Chunk.make_id(doc_id, 0, tenant_id=tenant),
                doc_id=doc_id,
                ordinal=0,
                content_hash=f"h{n}-{fields['text']}",
                **fields,
            )
        )
    return chunks_to_frame(chunks)


def _vectors(chunks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(3)
    ids = list(chunks["chunk_id"])
    dense = pd.DataFrame(
        {
            "chunk_id": ids,
            "content_hash": chunks["content_hash"],
            "embedding": list(rng.random((len(ids), 8), dtype=np.float32)),
        }
    )
    sparse = pd.DataFrame(
        {
            "chunk_id": ids,
            "content_hash": chunks["content_hash"],
            "indices": [np.array([n, n + 1], dtype=np.int32) for n in range(len(ids))],
            "values": [np.array([1.0, 0.5], dtype=np.float32) for _ in ids],
        }
    )
    return dense, sparse


def _sealed_version(
    versions: IndexVersions,
    chunks: pd.DataFrame,
    settings: str = SETTINGS,
    dense_index: DenseIndexSettings | None = None,
) -> IndexVersion:
    fingerprint = build_fingerprint(chunk_table(chunks), settings=settings)
    version = versions.candidate(fingerprint)
    dense, sparse = _vectors(chunks)
    tables = PointTables.in_memory(chunks, dense, sparse)
    build_faiss_index(version.layout.faiss, tables, "dense-model", dense_index=dense_index).close()
    build_qdrant_index(version.layout.qdrant, tables, "dense-model", "sparse-model").close()
    build_lexical_index(version.layout.lexical, chunks).close()
    count_terms(chunk_texts(chunks)).to_parquet(version.layout.vocabulary_counts)
    record_candidate_chunks(version, chunk_table(chunks))
    seal_candidate(versions, version, fingerprint, backend_chunk_ids(version), settings_fingerprint=settings)
    return version


@pytest.fixture
def base(tmp_path: Path) -> IndexVersion:
    return _sealed_version(IndexVersions(tmp_path / "indexes"), _chunks())


def test_the_default_stemmer_keeps_the_names_of_versions_built_before_the_setting() -> None:
    table = chunk_table(_chunks())
    encoder = object()  # what decides a fingerprint is the encoder's type, model name and shape
    legacy = {
        "dense": "object|",
        "sparse": "object|",
        "vocabulary": VocabularySettings().model_dump(),
        "graph_domain_fields": ["topics"],
        "context_tokens": ContextTokenSettings().model_dump(mode="json"),
    }
    args = (table, encoder, encoder, VocabularySettings(), ["topics"], ContextTokenSettings())
    assert candidate_fingerprints(*args) == (build_fingerprint(table, **legacy), settings_fingerprint(**legacy))
    unstemmed = candidate_fingerprints(*args, lexical_stemmer="none")
    assert unstemmed[0] != candidate_fingerprints(*args)[0] and unstemmed[1] != candidate_fingerprints(*args)[1]


def test_plan_names_upserted_and_deleted_chunks(base: IndexVersion) -> None:
    changed = _chunks(
        {"d1": {"text": "A new description."}, "d2": {"metadata": {"year": 1999, "topics": ["Genomics"]}}},
        drop=("d3",),
        add=1,
    )
    decision = decide_build(changed, SETTINGS, base, max_changed_fraction=0.2)
    plan = decision.plan
    assert plan is not None and plan.base == base.id
    assert (plan.upserted, plan.deleted, plan.documents) == (
        ("default/d1#0", "default/d2#0", "default/d20#0"),
        ("default/d3#0",),
        ("d1", "d2", "d20", "d3"),
    )
    assert plan.changed_fraction == pytest.approx(4 / 20)
    assert decision.reason.startswith(f"delta from {base.id}: 3 chunks upserted, 1 deleted")


def test_a_version_with_chunk_ids_not_qualified_by_tenant_is_built_from_in_full(tmp_path: Path) -> None:
    """A version built before chunk ids named their tenant keeps serving as it is, but a delta
    from it would replace every chunk: the next build is a full one and says why."""
    old = _sealed_version(IndexVersions(tmp_path / "indexes"), _chunks(legacy_ids=True))
    decision = decide_build(_chunks(), SETTINGS, old, max_changed_fraction=1.0)
    assert decision.plan is None
    assert decision.reason.startswith(f"the promoted version {old.id} predates chunk ids qualified by tenant")


def test_a_version_with_chunk_ids_not_qualified_by_tenant_still_serves(tmp_path: Path) -> None:
    """Opened as it is, such a version answers as it did: one hit per document, its chunk ids
    unchanged, and a document id still names a document (more like this, look-ups)."""
    old = _sealed_version(IndexVersions(tmp_path / "indexes"), _chunks(legacy_ids=True))
    lexical = TantivyLexicalStore.open(old.layout.lexical)
    with HybridRetriever(
        dense_encoder=None, sparse_encoder=None, dense_store=None, sparse_store=None, lexical_store=lexical
    ) as retriever:
        result = retriever.search("aligns reads against genomes", top_k=30, strategies=["bm25"], rerank=False)
        assert len(result.hits) == DOCUMENTS == len({hit.doc_id for hit in result.hits})
        assert all(hit.chunk_id == f"{hit.doc_id}#0" for hit in result.hits)
        like = retriever.search("d7", top_k=5, strategies=["bm25"], rerank=False)
        assert like.diagnostics["more_like_this"] == "d7" and "d7" not in {hit.doc_id for hit in like.hits}
        assert [hit.chunk_id for hit in lexical.fetch_documents(["d3"])] == ["d3#0"]


def test_above_the_threshold_or_without_a_base_is_a_full_build(base: IndexVersion) -> None:
    changed = _chunks({"d1": {"text": "A new description."}, "d2": {"text": "Another one."}})
    assert decide_build(changed, SETTINGS, base, 0.1).plan is not None
    above = decide_build(changed, SETTINGS, base, 0.05)
    assert above.plan is None
    assert "2 of 20 chunks changed (10.0%), above delta_max_changed_fraction 5.0%" in above.reason
    assert decide_build(changed, SETTINGS, base, 0.0).reason == "delta builds are off (delta_max_changed_fraction = 0)"
    assert decide_build(changed, SETTINGS, None, 0.1).reason == "no promoted version to start from"


def test_other_settings_or_an_older_base_are_a_full_build(base: IndexVersion) -> None:
    changed = _chunks({"d1": {"text": "A new description."}})
    other = decide_build(changed, "settings-2", base, 0.5)
    assert other.plan is None and other.reason == f"models or index settings changed since {base.id}"
    base.layout.chunks.unlink()  # as sealed before delta builds existed
    assert "predates delta builds" in decide_build(changed, SETTINGS, base, 0.5).reason


def test_a_filter_field_of_another_type_is_a_full_build(base: IndexVersion) -> None:
    retyped = _chunks({"d1": {"metadata": {"year": "unknown", "topics": ["Genomics"]}}})
    decision = decide_build(retyped, SETTINGS, base, 0.5)
    assert decision.plan is None and decision.reason.endswith("(year: integer -> keyword)")
    added = decide_build(_chunks({"d1": {"metadata": {"year": 2001, "license": "MIT"}}}), SETTINGS, base, 0.5)
    assert added.plan is None and "license: absent -> keyword" in added.reason
    # The type every payload gives together decides: a float among integers makes a float field.
    floats = decide_build(_chunks({"d1": {"metadata": {"year": 2001.5, "topics": ["Genomics"]}}}), SETTINGS, base, 0.5)
    assert "year: integer -> float" in floats.reason


def test_delta_term_counts_equal_a_recount(base: IndexVersion) -> None:
    # d5 moves to another tenant unchanged: its terms' counts move with it.
    changed = _chunks(
        {
            "d1": {"text": "Zebrafish neural crest imaging.", "metadata": {"keywords": ["Imaging"]}},
            "d5": {"tenant_id": "beta"},
        },
        drop=("d4",),
        add=2,
    )
    plan = decide_build(changed, SETTINGS, base, 0.5).plan
    assert plan is not None and "d5" in plan.documents
    counts = delta_term_counts(Delta(base, plan), changed)
    pd.testing.assert_frame_equal(counts, count_terms(chunk_texts(changed)))
    by_term = counts.set_index("term")
    assert (list(by_term.at["variants", "tenants"]), list(by_term.at["variants", "tenant_doc_freq"])) == (
        ["beta", "default"],
        [1, 9],
    )
    assert list(by_term.at["zebrafish", "tenants"]) == ["default"]


def test_a_base_whose_term_counts_predate_tenants_is_a_full_build(base: IndexVersion) -> None:
    old_counts = pd.read_parquet(base.layout.vocabulary_counts).drop(columns=["tenants", "tenant_doc_freq"])
    old_counts.to_parquet(base.layout.vocabulary_counts)
    decision = decide_build(_chunks({"d1": {"text": "A new description."}}), SETTINGS, base, 0.5)
    assert decision.plan is None
    assert decision.reason == f"the promoted version {base.id} predates per-tenant term counts"


def test_prune_spares_the_base_of_an_unfinished_delta(tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path / "indexes")
    old = _sealed_version(versions, _chunks())
    newer = [_sealed_version(versions, _chunks({"d1": {"text": f"Revision {n}."}})) for n in range(3)]
    versions.promote(newer[-1], reason="test")
    changed = _chunks({"d0": {"text": "In progress."}})
    candidate = versions.candidate(build_fingerprint(chunk_table(changed), settings=SETTINGS))
    decision = decide_build(changed, SETTINGS, old, 0.5)
    record_decision(candidate, decision)
    assert candidate.delta_base == old.id
    assert versions.prune(keep=1) == [newer[0].id, newer[1].id] and old.sealed
    # A full build (or a sealed candidate) protects nothing.
    record_decision(candidate, decide_build(changed, SETTINGS, None, 0.5))
    assert candidate.delta_base is None and versions.prune(keep=1) == [old.id]


def test_only_an_approximate_version_is_named_by_its_dense_index_settings() -> None:
    table = chunk_table(_chunks())
    encoder = object()
    args = (table, encoder, encoder, VocabularySettings(), ["topics"], ContextTokenSettings())
    exact = candidate_fingerprints(*args)
    assert candidate_fingerprints(*args, dense_index=DenseIndexSettings(hnsw_m=8)) == exact
    approximate = candidate_fingerprints(*args, dense_index=DenseIndexSettings(approximate_from_chunks=len(table)))
    # Crossing the threshold changes the settings fingerprint, so no delta mixes flat and approximate.
    assert approximate[0] != exact[0] and approximate[1] != exact[1]
    other_graph = DenseIndexSettings(approximate_from_chunks=len(table), hnsw_ef_search=64)
    assert candidate_fingerprints(*args, dense_index=other_graph)[1] != approximate[1]
    other_probes = DenseIndexSettings(approximate_from_chunks=len(table), ivf_probes=8)
    assert candidate_fingerprints(*args, dense_index=other_probes)[1] != approximate[1]


# --- the lexical index of a delta, tenant by tenant ----------------------------------------------

QUERIES = ("aligns reads against genomes", "variants", "assembly seeds", "a brand new description")
SCOPES = (None, "default", "beta")


def _bm25(store: TantivyLexicalStore) -> dict[tuple, list[tuple[str, float]]]:
    return {
        (query, scope): [
            (hit.chunk_id, round(hit.score, 5))
            for hit in store.search_text(query, 30, parse_filters({"tenant_id": scope}) if scope else ())
        ]
        for query in QUERIES
        for scope in SCOPES
    }


def _inodes(directory: Path) -> set[int]:
    return {path.stat().st_ino for path in directory.rglob("*") if path.is_file() and path.suffix != ".lock"}


def _stored_chunks(chunks: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, PartedTable]:
    """What the tantivy step hands a delta: every chunk's id and tenant, and the stored table."""
    stored = path.with_name(f"{path.name}-chunks.parquet")
    write_parquet(chunks, stored)
    return chunks[["chunk_id", "tenant_id"]], table_path(stored)


def _lexical_delta(base: IndexVersion, changed: pd.DataFrame, path: Path) -> TantivyLexicalStore:
    plan = decide_build(changed, SETTINGS, base, max_changed_fraction=0.5).plan
    assert plan is not None
    return delta_lexical_index(Delta(base, plan), path, *_stored_chunks(changed, path))


def test_a_delta_links_each_unchanged_tenants_lexical_index_and_rebuilds_each_changed_one(
    tmp_path: Path, monkeypatch
) -> None:
    base = _sealed_version(IndexVersions(tmp_path / "indexes"), _chunks(beta_every=4))
    with TantivyLexicalStore.open(base.layout.lexical) as before:
        base_answers = _bm25(before)
    base_files = {
        p.relative_to(base.layout.lexical): p.read_bytes() for p in base.layout.lexical.rglob("*") if p.is_file()
    }
    changed = _chunks({"d1": {"text": "A brand new description."}}, drop=("d2",), beta_every=4)
    plan = decide_build(changed, SETTINGS, base, max_changed_fraction=0.5).plan
    assert plan is not None
    made: list[int] = []  # the upserted chunks' payloads are made once, for field kinds and writes alike
    monkeypatch.setattr(
        delta_module, "index_payloads", lambda rows, *args: made.append(len(rows)) or index_payloads(rows, *args)
    )

    stored = _stored_chunks(changed, tmp_path / "delta")
    with (
        delta_lexical_index(Delta(base, plan), tmp_path / "delta", *stored) as delta,
        build_lexical_index(tmp_path / "full", changed) as full,
    ):
        # Beta's documents did not change: its index is the base's files, hard-linked.
        beta = delta._dirs["beta"]
        assert _inodes(tmp_path / "delta" / "index" / beta) == _inodes(base.layout.lexical / "index" / beta)
        assert not _inodes(tmp_path / "delta" / "index" / delta._dirs["default"]) & _inodes(base.layout.lexical)
        # Default's index was rebuilt, so every answer (scores included) is a full build's.
        assert _bm25(delta) == _bm25(full)
    assert len(made) == 1 and made[0] > 0
    manifest = read_build_manifest(tmp_path / "delta")
    assert (manifest["rebuilt_tenants"], manifest["patched_tenants"]) == (["default"], [])
    whole = read_build_manifest(tmp_path / "full")
    assert {k: manifest[k] for k in whole} == {**whole}
    # The base's files and answers are as they were.
    assert {
        p.relative_to(base.layout.lexical): p.read_bytes() for p in base.layout.lexical.rglob("*") if p.is_file()
    } == base_files
    with TantivyLexicalStore.open(base.layout.lexical) as after:
        assert _bm25(after) == base_answers


def test_an_approximate_versions_delta_patches_a_changed_tenant_in_place_until_its_deletes_pass_the_share(
    tmp_path: Path, monkeypatch
) -> None:
    approximate = DenseIndexSettings(approximate_from_chunks=0)
    base = _sealed_version(IndexVersions(tmp_path / "indexes"), _chunks(beta_every=4), dense_index=approximate)
    with TantivyLexicalStore.open(base.layout.lexical) as before:
        base_answers = _bm25(before)
    changed = _chunks({"d1": {"text": "A brand new description."}}, drop=("d2",), beta_every=4)

    def unread(*_args: object) -> None:
        raise AssertionError("the facets were counted from every kept payload")

    # The facets come from the base's counts and the delta's changes, not from every payload.
    monkeypatch.setattr(delta_module, "kept_payloads", unread)
    with (
        _lexical_delta(base, changed, tmp_path / "patched") as patched,
        build_lexical_index(tmp_path / "full", changed) as full,
    ):
        # Default's index is the base's segments plus a new one: its old files are linked.
        default = _inodes(tmp_path / "patched" / "index" / patched._dirs["default"])
        assert default & _inodes(base.layout.lexical / "index" / patched._dirs["default"])
        assert patched.chunk_ids() == full.chunk_ids()
        # The same documents are found; BM25 still counts the two it deleted (d2, d1's old row).
        for request, hits in _bm25(full).items():
            assert {chunk_id for chunk_id, _ in _bm25(patched)[request]} == {chunk_id for chunk_id, _ in hits}, request
    manifest = read_build_manifest(tmp_path / "patched")
    assert (manifest["rebuilt_tenants"], manifest["patched_tenants"]) == ([], ["default"])
    assert manifest["deleted_in_statistics"] == {"default": 2}
    # The facets the NL filter parser reads are the full build's, though no payload was rebuilt.
    whole = read_build_manifest(tmp_path / "full")
    assert {k: manifest[k] for k in ("count", "facets", "tenant_facets", "field_kinds")} == {
        k: whole[k] for k in ("count", "facets", "tenant_facets", "field_kinds")
    }
    assert FacetCounts.load(tmp_path / "patched") == FacetCounts.load(tmp_path / "full")
    with TantivyLexicalStore.open(base.layout.lexical) as after:
        assert _bm25(after) == base_answers
    monkeypatch.undo()

    # A base saved before facet counts were: they are counted from every payload, to the same facets.
    (base.layout.lexical / FACET_COUNTS_FILE).unlink()
    with _lexical_delta(base, changed, tmp_path / "recounted"):
        pass
    recounted = read_build_manifest(tmp_path / "recounted")
    assert (recounted["facets"], recounted["tenant_facets"]) == (whole["facets"], whole["tenant_facets"])
    assert FacetCounts.load(tmp_path / "recounted") == FacetCounts.load(tmp_path / "full")

    # Deletes already counted near the share (3 of default's 14 documents): this delta's 2 pass it.
    write_build_manifest(
        base.layout.lexical, **{**read_build_manifest(base.layout.lexical), "deleted_in_statistics": {"default": 1}}
    )
    with (
        _lexical_delta(base, changed, tmp_path / "rebuilt") as rebuilt,
        TantivyLexicalStore.open(tmp_path / "full") as full,
    ):
        assert _bm25(rebuilt) == _bm25(full)
    manifest = read_build_manifest(tmp_path / "rebuilt")
    assert (manifest["rebuilt_tenants"], manifest["deleted_in_statistics"]) == (["default"], {})


@pytest.mark.parametrize("backend", ["faiss", "qdrant-edge"])
def test_a_delta_store_is_checked_by_its_changes_and_listed_only_when_they_do_not_hold(
    base: IndexVersion, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = _chunks({"d1": {"text": "A new description."}}, drop=("d3",), add=1)
    plan = decide_build(changed, SETTINGS, base, max_changed_fraction=0.2).plan
    assert plan is not None
    delta, (dense, sparse), path = Delta(base, plan), _vectors(changed), tmp_path / backend
    if backend == "faiss":
        store: FaissDenseStore | QdrantEdgeStore = delta_faiss_index(delta, path, changed, dense, "dense-model")
    else:
        store = delta_qdrant_index(delta, path, changed, dense, sparse, "dense-model", "sparse-model")
    expected = set(changed["chunk_id"])
    listings: list[int] = []
    listing = type(store).chunk_ids_given
    monkeypatch.setattr(type(store), "chunk_ids_given", lambda self, ids: listings.append(1) or listing(self, ids))

    assert delta_held_chunk_ids(store, delta, expected) == expected and not listings  # nothing listed
    # Not what the plan says the build holds: listed, and the difference found.
    assert delta_held_chunk_ids(store, delta, expected - {"default/d4#0"}) == expected and listings == [1]
    store.delete(["default/d5#0"])  # a chunk the delta did not touch goes missing
    store.finalize()
    assert delta_held_chunk_ids(store, delta, expected) == expected - {"default/d5#0"} and listings == [1, 1]
    deleted = _chunks()[lambda chunks: chunks["chunk_id"] == "default/d3#0"]
    store.upsert_dense(index_payloads(deleted), np.ones((1, 8), dtype=np.float32))
    store.finalize()  # the deleted chunk is back in place of the missing one: the count alone would pass
    held = delta_held_chunk_ids(store, delta, expected)
    store.close()
    assert held == expected - {"default/d5#0"} | {"default/d3#0"} and listings == [1, 1, 1]


def test_a_delta_sets_aside_its_documents_chunk_rows_which_its_steps_read_instead_of_the_table(
    tmp_path: Path, monkeypatch
) -> None:
    versions = IndexVersions(tmp_path / "indexes")
    base = _sealed_version(versions, _chunks())
    changed = _chunks({"d1": {"text": "A new description."}}, drop=("d2",), add=1)
    candidate = versions.candidate(build_fingerprint(chunk_table(changed), settings=SETTINGS))
    decision = decide_build(changed, SETTINGS, base, 0.5)
    assert decision.plan is not None
    record_decision(candidate, decision)
    stored = _stored_chunks(changed, tmp_path / "stored")[1]
    delta = Delta(base, decision.plan, candidate.layout.delta_chunks)
    # The changed documents' rows (d2 is gone: none), as the table holds them, read without it.
    expected = stored.read_where("doc_id", decision.plan.documents).to_pandas()
    monkeypatch.setattr(PartedTable, "read_where", lambda *_: pytest.fail("the chunk table was searched"))
    pd.testing.assert_frame_equal(delta.chunk_rows(stored), expected)
    assert delta.chunk_rows(stored, ["default/d1#0"])["chunk_id"].tolist() == ["default/d1#0"]
    monkeypatch.undo()
    # A candidate named before the rows were set aside finds them in the table.
    candidate.layout.delta_chunks.unlink()
    pd.testing.assert_frame_equal(delta.chunk_rows(stored), expected)
    # A full build leaves no rows behind.
    candidate.layout.delta_chunks.touch()
    record_decision(candidate, decide_build(changed, SETTINGS, None, 0.5))
    assert not candidate.layout.delta_chunks.exists()


def test_a_decision_from_the_chunk_table_reads_only_the_changed_documents_rows(tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path / "indexes")
    base = _sealed_version(versions, _chunks())
    changed = _chunks({"d1": {"text": "A new description."}}, drop=("d2",), add=1)
    stored = _stored_chunks(changed, tmp_path / "stored")[1]
    asked: list[tuple[str, ...]] = []

    def rows_of(documents: Collection[str]) -> pd.DataFrame:
        asked.append(tuple(documents))
        return stored.read_where("doc_id", documents).to_pandas()

    from_frame = decide_build(changed, SETTINGS, base, 0.5)
    from_table = decide_build(rows_of, SETTINGS, base, 0.5, table=chunk_table(changed))
    assert from_table.plan == from_frame.plan and asked == [from_frame.plan.documents]
    assert from_table.rows is not None and from_frame.rows is not None
    pd.testing.assert_frame_equal(
        from_table.rows.reset_index(drop=True).astype(from_frame.rows.dtypes.to_dict()),
        from_frame.rows.reset_index(drop=True),
    )
    with pytest.raises(ValueError, match="chunk table"):
        decide_build(rows_of, SETTINGS, base, 0.5)
