"""BM25 statistics per tenant: each tenant's chunks in an index of their own, so that a tenant's
scores (document count, document frequencies, average length) count its own documents only;
searches across tenants, writes that cross tenants, and indexes of the shared format 3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tantivy

from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.tantivy.store import (
    FORMAT_VERSION,
    INDEX_DIR,
    MAX_OPEN_WRITERS,
    SHARED_INDEX_FORMAT_VERSION,
    TantivyLexicalStore,
    _build_schema,
)

# "zeppelin" is in alpha's a0 only; "aspirin" is in a0 and in five beta documents. Both occur once
# in a0, so with alpha's own statistics they score the same there.
ALPHA_ONLY, SHARED = "zeppelin", "aspirin"
ALPHA_TEXTS = [
    "Zeppelin crews took aspirin before the long flight.",
    "Harbour cranes unload containers at night.",
    "Bicycle chains need oil every few hundred kilometres.",
]
BETA_TEXTS = [f"Aspirin trial {i} measured platelet function in volunteers." for i in range(5)]


def payload(chunk_id: str, tenant: str, text: str, section: str = "body", **extra) -> dict:
    doc_id = chunk_id.split("#")[0]
    return {"doc_id": doc_id, "chunk_id": chunk_id, "tenant_id": tenant, "section": section, "title": "",
            "text": text, **extra}  # fmt: skip


ALPHA = [payload(f"a{i}#0", "alpha", text) for i, text in enumerate(ALPHA_TEXTS)]
BETA = [payload(f"b{i}#0", "beta", text) for i, text in enumerate(BETA_TEXTS)]
ALPHA_SCOPE = parse_filters({"tenant_id": "alpha"})
# Queries whose alpha-scoped scores must not depend on other tenants.
QUERIES = [ALPHA_ONLY, SHARED, f"{ALPHA_ONLY} {SHARED}", "containers oil flight", "platelet aspirin"]


def new_store(path: Path, payloads: list[dict], **options) -> TantivyLexicalStore:
    store = TantivyLexicalStore.create(path, **options)
    store.add(payloads)
    store.finalize()
    return store


def write_shared_index(path: Path, payloads: list[dict], **options) -> TantivyLexicalStore:
    """A store of format 3, as written before indexes per tenant: one tantivy index directly in
    ``index/`` for every tenant (written through the store's format-3 path), reopened."""
    TantivyLexicalStore.create(path, **options).close()
    manifest = json.loads((path / "manifest.json").read_text())
    index = tantivy.Index(_build_schema(manifest["field_types"], manifest["schema_names"]), path=str(path / INDEX_DIR))
    del index
    del manifest["tenant_dirs"]
    (path / "manifest.json").write_text(json.dumps({**manifest, "format_version": SHARED_INDEX_FORMAT_VERSION}))
    store = TantivyLexicalStore.open(path)
    assert store.shared_statistics
    store.add(payloads)
    store.close()
    return TantivyLexicalStore.open(path)


def scores(store: TantivyLexicalStore, query: str, filters=ALPHA_SCOPE) -> dict[str, float]:
    return {h.chunk_id: h.score for h in store.search_text(query, top_k=100, filters=filters)}


def alpha_scores(store: TantivyLexicalStore) -> dict[str, dict[str, float]]:
    return {query: scores(store, query) for query in QUERIES}


def test_another_tenants_documents_do_not_change_a_tenants_scores(tmp_path):
    store = new_store(tmp_path / "split", ALPHA + BETA)
    assert store.shared_statistics is False
    only_x, only_y = scores(store, ALPHA_ONLY), scores(store, SHARED)
    assert list(only_x) == list(only_y) == ["a0#0"]
    # Same term frequency, same document, one alpha document each: bit for bit the same score.
    assert only_x["a0#0"] == only_y["a0#0"]
    # The scores are those of an index holding alpha's documents alone.
    alone = new_store(tmp_path / "alone", ALPHA)
    before = alpha_scores(store)
    assert before == alpha_scores(alone)
    # Beta adding five more "aspirin" documents, then losing three, changes none of alpha's scores.
    store.add([payload(f"b{i}#0", "beta", f"Aspirin and aspirin again, study {i}.") for i in range(5, 10)])
    store.finalize()
    assert alpha_scores(store) == before
    store.delete(["b0#0", "b6#0", "b9#0"])
    store.finalize()
    assert alpha_scores(store) == before
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "split")
    assert alpha_scores(reopened) == before
    # Beta's own scores do count beta's documents: "aspirin" is in all seven left.
    assert set(scores(reopened, SHARED, parse_filters({"tenant_id": "beta"}))) == {
        f"b{i}#0" for i in (1, 2, 3, 4, 5, 7, 8)
    }


def test_one_shared_index_leaks_another_tenants_document_frequencies(tmp_path):
    # What the review found, on an index of the shared format: alpha's score for a word tells how
    # many beta documents hold it.
    shared = write_shared_index(tmp_path / "shared", ALPHA + BETA)
    only_x, only_y = scores(shared, ALPHA_ONLY), scores(shared, SHARED)
    assert list(only_x) == list(only_y) == ["a0#0"]
    assert only_x["a0#0"] > only_y["a0#0"] * 1.2
    # Per tenant, the two words score the same (see the test above).
    split = new_store(tmp_path / "split", ALPHA + BETA)
    assert scores(split, ALPHA_ONLY)["a0#0"] == scores(split, SHARED)["a0#0"]


def long_beta_documents(count: int) -> list[dict]:
    filler = " ".join(f"measurement{i % 37} cohort platelet" for i in range(80))
    return [payload(f"long{i}#0", "beta", f"Aspirin cohort {i}: {filler}") for i in range(count)]


def test_another_tenants_long_documents_change_neither_count_nor_average_length(tmp_path):
    store = new_store(tmp_path / "split", ALPHA + BETA)
    shared = write_shared_index(tmp_path / "shared", ALPHA + BETA)
    before, shared_before = alpha_scores(store), alpha_scores(shared)
    for target in (store, shared):
        target.add(long_beta_documents(100))
        target.close()
    store, shared = TantivyLexicalStore.open(tmp_path / "split"), TantivyLexicalStore.open(tmp_path / "shared")
    assert store.count() == shared.count() == len(ALPHA) + len(BETA) + 100
    assert alpha_scores(store) == before
    # With one index for both, alpha's scores move with beta's document count and average length,
    # also for a word that no beta document holds.
    after = alpha_scores(shared)
    assert after[ALPHA_ONLY]["a0#0"] != shared_before[ALPHA_ONLY]["a0#0"]
    assert after["containers oil flight"] != shared_before["containers oil flight"]


TENANTS = {
    "alpha": ALPHA,
    "beta": BETA,
    "gamma": [
        payload("g0#0", "gamma", "Aspirin for zeppelin pilots with headaches.", section="abstract"),
        payload("g1#0", "gamma", "Aspirin and coffee.", section="abstract"),
        payload("g2#0", "gamma", "A zeppelin museum opens."),
    ],
}
EVERYONE = [p for payloads in TENANTS.values() for p in payloads]


@pytest.fixture
def tenants(tmp_path):
    store = new_store(tmp_path / "tenants", EVERYONE, field_types={"year": "integer"})
    yield store
    store.close()


def test_an_unscoped_search_merges_every_tenants_hits_by_score(tenants):
    query = f"{SHARED} {ALPHA_ONLY}"
    per_tenant = {t: scores(tenants, query, parse_filters({"tenant_id": t})) for t in TENANTS}
    everyone = {chunk: score for found in per_tenant.values() for chunk, score in found.items()}
    hits = tenants.search_text(query, top_k=100)
    # Each hit scored by its own tenant's statistics, all of them, best first.
    assert {h.chunk_id: h.score for h in hits} == everyone
    assert [h.score for h in hits] == sorted(everyone.values(), reverse=True)
    top = tenants.search_text(query, top_k=3)
    assert [(h.chunk_id, h.score) for h in top] == [(h.chunk_id, h.score) for h in hits[:3]]
    assert [h.payload["chunk_id"] for h in top] == [h.chunk_id for h in top]
    assert len({h.payload["tenant_id"] for h in hits}) == 3


def test_filters_apply_in_every_tenants_search(tenants):
    query = f"{SHARED} {ALPHA_ONLY}"
    abstracts = tenants.search_text(query, top_k=10, filters=parse_filters({"section": "abstract"}))
    assert {h.chunk_id for h in abstracts} == {"g0#0", "g1#0"}
    beta_abstracts = parse_filters({"section": "abstract", "tenant_id": "beta"})
    assert tenants.search_text(query, top_k=10, filters=beta_abstracts) == []
    listed = tenants.search_text(query, top_k=10, filters=parse_filters({"doc_id": ["a0", "b3", "g2"]}))
    assert {h.chunk_id for h in listed} == {"a0#0", "b3#0", "g2#0"}


def test_a_scope_of_several_tenants_searches_exactly_theirs(tenants):
    query = f"{SHARED} {ALPHA_ONLY}"
    two = tenants.search_text(query, top_k=100, filters=parse_filters({"tenant_id": ["alpha", "gamma", "nobody"]}))
    expected = {**scores(tenants, query), **scores(tenants, query, parse_filters({"tenant_id": "gamma"}))}
    assert {h.chunk_id: h.score for h in two} == expected
    assert [h.score for h in two] == sorted(expected.values(), reverse=True)
    assert tenants.search_text(query, top_k=5, filters=parse_filters({"tenant_id": "nobody"})) == []
    # Two tenant filters: only the tenants both allow.
    both = parse_filters([*parse_filters({"tenant_id": ["alpha", "beta"]}), *parse_filters({"tenant_id": "beta"})])
    assert {h.payload["tenant_id"] for h in tenants.search_text(query, top_k=100, filters=both)} == {"beta"}
    # fetch_documents reads the same tenants.
    assert [h.chunk_id for h in tenants.fetch_documents(["a0", "b1", "g1"], parse_filters({"tenant_id": "gamma"}))] == [
        "g1#0"
    ]
    assert [h.chunk_id for h in tenants.fetch_documents(["g1", "a0", "b1"])] == ["g1#0", "a0#0", "b1#0"]


def test_tenant_names_of_any_characters_get_an_index_each(tmp_path):
    names = ["../up", "a/b", "A/B", "a_b", "", "tenant with spaces", "ünï", "x" * 300]
    payloads = [payload(f"d{i}#0", name, f"Aspirin note {i}") for i, name in enumerate(names)]
    new_store(tmp_path / "names", payloads).close()
    manifest = json.loads((tmp_path / "names" / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    dirs = manifest["tenant_dirs"]
    assert set(dirs) == set(names) and len(set(dirs.values())) == len(names)
    assert {p.name for p in (tmp_path / "names" / INDEX_DIR).iterdir()} == set(dirs.values())
    assert all(len(d) < 80 and d.replace("_", "").replace("-", "").isalnum() and d.isascii() for d in dirs.values())
    store = TantivyLexicalStore.open(tmp_path / "names")
    for i, name in enumerate(names):
        assert [h.chunk_id for h in store.search_text("aspirin", 10, parse_filters({"tenant_id": name}))] == [f"d{i}#0"]
    assert store.count() == len(names)


def test_a_chunk_moves_between_tenants_when_added_to_another(tmp_path):
    store = new_store(tmp_path / "move", EVERYONE)
    moved = payload("a0#0", "beta", "Zeppelin crews took aspirin before the long flight, now beta's.")
    store.add([moved])
    store.finalize()
    assert store.count() == len(EVERYONE)
    assert "a0#0" not in scores(store, ALPHA_ONLY)
    assert list(scores(store, ALPHA_ONLY, parse_filters({"tenant_id": "beta"}))) == ["a0#0"]
    # Deleted in whichever tenant holds it, several tenants at once; unknown ids are ignored.
    store.delete(["a0#0", "a1#0", "g2#0", "nothing#0"])
    store.finalize()
    assert store.count() == len(EVERYONE) - 3
    assert store.chunk_ids() == {p["chunk_id"] for p in EVERYONE} - {"a0#0", "a1#0", "g2#0"}
    # Re-added to alpha. (Deleted documents stay in their own tenant's statistics until merged.)
    store.add([ALPHA[0], ALPHA[1]])
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "move")
    assert reopened.count() == len(EVERYONE) - 1
    assert set(scores(reopened, "zeppelin harbour bicycle")) == {"a0#0", "a1#0", "a2#0"}
    assert reopened.search_text(ALPHA_ONLY, 10, parse_filters({"tenant_id": "beta"})) == []


def test_a_chunk_added_twice_before_finalize_is_held_once(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "twice")
    store.add(ALPHA)
    store.add([dict(ALPHA[0], tenant_id="gamma")])  # not committed yet in alpha's index
    store.add([dict(ALPHA[0], tenant_id="beta")])
    store.delete(["a1#0"])
    store.add([dict(ALPHA[1], tenant_id="gamma")])
    store.finalize()
    assert store.count() == len(ALPHA)
    tenant_of = {h.chunk_id: h.payload["tenant_id"] for h in store.search_text("zeppelin harbour bicycle", 10)}
    assert tenant_of == {"a0#0": "beta", "a1#0": "gamma", "a2#0": "alpha"}
    store.close()


def test_a_batch_over_many_tenants_commits_writers_on_the_way(tmp_path):
    count = MAX_OPEN_WRITERS + 4
    payloads = [payload(f"d{i}#0", f"t{i}", f"Aspirin note {i}") for i in range(count)]
    store = new_store(tmp_path / "many", payloads)
    assert store.count() == count
    # Every chunk moves to the next tenant, across writers closed and reopened.
    store.add([dict(p, tenant_id=f"t{(i + 1) % count}") for i, p in enumerate(payloads)])
    store.delete(["d0#0"])
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "many")
    assert reopened.count() == count - 1
    for i in range(1, count):
        found = reopened.search_text("aspirin", 10, parse_filters({"tenant_id": f"t{(i + 1) % count}"}))
        assert [h.chunk_id for h in found] == [f"d{i}#0"]
    # Only one store writes at a time, whichever tenants it writes to.
    reopened.add([payloads[1]])
    other = TantivyLexicalStore.open(tmp_path / "many")
    with pytest.raises(RuntimeError, match="already has a writer"):
        other.add([payloads[5]])
    reopened.close()
    other.add([payloads[5]])
    other.close()


def test_an_index_of_the_shared_format_still_opens_and_answers(tmp_path):
    shared = write_shared_index(tmp_path / "shared", EVERYONE, field_types={"year": "integer"})
    split = new_store(tmp_path / "split", EVERYONE, field_types={"year": "integer"})
    assert shared.shared_statistics and not (tmp_path / "shared" / "manifest.json").read_text().count("tenant_dirs")
    assert shared.count() == len(EVERYONE) and shared.chunk_ids() == split.chunk_ids()
    # Filters (the tenant's included) still decide membership; statistics span every tenant.
    for filters in (ALPHA_SCOPE, parse_filters({"tenant_id": ["alpha", "gamma"]}), []):
        assert set(scores(shared, SHARED, filters)) == set(scores(split, SHARED, filters))
    assert scores(shared, SHARED)["a0#0"] < scores(shared, ALPHA_ONLY)["a0#0"]
    # Unscoped and in one index: as if every chunk were one tenant's, the scores of one shared index.
    one_tenant = new_store(tmp_path / "one", [dict(p, tenant_id="all") for p in EVERYONE])
    assert scores(shared, SHARED, []) == scores(one_tenant, SHARED, [])
    assert [h.chunk_id for h in shared.fetch_documents(["g1", "a0"], ALPHA_SCOPE)] == ["a0#0"]
    assert set(shared.filter_fields(["alpha"])) == {"chunk_id", "doc_id", "tenant_id", "section"}
    # Writes go to the one index.
    shared.add([payload("a9#0", "alpha", "Zeppelin hangar.")])
    shared.delete(["b0#0"])
    shared.close()
    reopened = TantivyLexicalStore.open(tmp_path / "shared")
    assert reopened.shared_statistics and reopened.count() == len(EVERYONE)
    assert set(scores(reopened, ALPHA_ONLY)) == {"a0#0", "a9#0"}
    assert sorted(p.name for p in (tmp_path / "shared" / INDEX_DIR).iterdir() if p.is_dir()) == []
