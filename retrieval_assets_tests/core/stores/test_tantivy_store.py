"""Tantivy lexical store: query-term weighting, expansion terms, tag boosts and fetch_documents."""

from __future__ import annotations

import json

import pytest

from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.core.stores.tantivy_store import TAG_SCORE, TantivyLexicalStore

# (doc_id, ordinal, tenant, tags, title, text). Texts are real sentences; the words the tests
# rely on are noted where they matter.
DOCS = [
    ("aspirin", 0, "acme", [], "Aspirin after heart attack",
     "Low-dose aspirin lowers the risk of a second heart attack in adults."),
    # Only document with "myocardial" and "infarction"; no query word of the tests below.
    ("mi", 0, "acme", [], "Myocardial infarction outcomes",
     "Mortality after myocardial infarction fell in elderly patients over two decades."),
    # "stroke" and "embolism": one document each, same length, so only the boost differs.
    ("stroke", 0, "acme", [], "Cerebral stroke", "Anticoagulants reduce cerebral stroke risk."),
    ("embolism", 0, "acme", [], "Pulmonary embolism", "Anticoagulants reduce pulmonary embolism risk."),
    # Two identical MRI texts; only the second is tagged.
    ("mri-plain", 0, "acme", ["format:NIfTI"], "Brain MRI viewer", "Open and inspect brain MRI volumes."),
    ("mri-dicom", 0, "acme", ["format:DICOM", "os:linux"], "Brain MRI viewer", "Open and inspect brain MRI volumes."),
    # Tagged DICOM but about something else entirely: a tag alone must not retrieve it.
    ("pacs", 0, "acme", ["format:DICOM"], "Hospital archive", "Stores radiology studies for clinics."),
    # Another tenant holding every word, expansion term and tag the tests use.
    ("other", 0, "globex", ["format:DICOM"], "Myocardial infarction and brain MRI",
     "Aspirin, heart attack, myocardial infarction, stroke, embolism and brain MRI volumes."),
    # A document of three chunks, added out of order; "#10" sorts before "#2" as text.
    ("long", 2, "acme", [], "Long review", "Second part of a long review of cardiology."),
    ("long", 10, "acme", [], "Long review", "Last part of a long review of cardiology."),
    ("long", 0, "acme", [], "Long review", "First part of a long review of cardiology."),
]


def payload(doc_id: str, ordinal: int, tenant: str, tags: list[str], title: str, text: str) -> dict:
    return {
        "doc_id": doc_id,
        "chunk_id": f"{doc_id}#{ordinal}",
        "tenant_id": tenant,
        "section": "body",
        "title": title,
        "text": text,
        "tags": tags,
    }


PAYLOADS = [payload(*doc) for doc in DOCS]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = TantivyLexicalStore.create(tmp_path_factory.mktemp("tantivy") / "index", field_types={"tags": "keyword"})
    store.add(PAYLOADS)
    store.finalize()
    yield store
    store.close()


def doc_ids(hits) -> list[str]:
    return [h.payload["doc_id"] for h in hits]


ACME = parse_filters({"tenant_id": "acme"})


# -- query words ----------------------------------------------------------------------------


def test_repeated_query_words_weigh_more(store):
    # Lucene sums one clause per token: "stroke" twice outweighs "embolism" once.
    assert doc_ids(store.search_text("stroke stroke embolism", top_k=2, filters=ACME)) == ["stroke", "embolism"]
    assert doc_ids(store.search_text("stroke embolism embolism", top_k=2, filters=ACME)) == ["embolism", "stroke"]


def test_stop_words_are_not_searched(store):
    assert store.search_text("the of a to", top_k=5) == []
    with_stop_words = store.search_text("the risk of a stroke", top_k=3)
    assert [h.score for h in with_stop_words] == pytest.approx([h.score for h in store.search_text("risk stroke", 3)])


# -- expansion terms ------------------------------------------------------------------------


def test_expansion_term_finds_a_document_without_the_query_words(store):
    assert "mi" not in doc_ids(store.search_text("heart attack", top_k=10, filters=ACME))
    hits = store.search_text("heart attack", top_k=10, filters=ACME, expansion_terms={"myocardial": 0.5})
    assert "mi" in doc_ids(hits)
    # A weaker expansion term does not outrank the document that has the query words.
    assert doc_ids(hits)[0] == "aspirin"


def test_expansion_terms_are_analysed_like_the_query(store):
    # "Infarctions" stems to the indexed "infarct"; "of" is a stop word and drops out.
    hits = store.search_text("heart attack", top_k=10, filters=ACME, expansion_terms={"Infarctions of": 0.5})
    assert "mi" in doc_ids(hits)


def test_expansion_weights_order_results(store):
    hits = store.search_text("lung", top_k=2, filters=ACME, expansion_terms={"stroke": 0.3, "embolism": 0.9})
    assert doc_ids(hits) == ["embolism", "stroke"]
    assert hits[0].score == pytest.approx(3 * hits[1].score)
    hits = store.search_text("lung", top_k=2, filters=ACME, expansion_terms={"stroke": 0.9, "embolism": 0.3})
    assert doc_ids(hits) == ["stroke", "embolism"]


def test_query_without_words_still_searches_its_expansion_terms(store):
    hits = store.search_text("the of", top_k=5, filters=ACME, expansion_terms={"embolism": 1.0})
    assert doc_ids(hits) == ["embolism"]


def test_expansion_weight_must_be_within_zero_and_one(store):
    assert store.search_text("lung", top_k=5, expansion_terms={"stroke": 0.0}) == []
    for weight in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="weight must be in"):
            store.search_text("lung", top_k=5, expansion_terms={"stroke": weight})


# -- tags -----------------------------------------------------------------------------------


def test_tags_boost_the_tagged_document(store):
    plain = store.search_text("brain MRI volumes", top_k=2, filters=ACME)
    assert plain[0].score == pytest.approx(plain[1].score)  # identical texts
    tagged = store.search_text("brain MRI volumes", top_k=10, filters=ACME, tag_terms=["format:DICOM", "os:linux"])
    assert doc_ids(tagged)[:2] == ["mri-dicom", "mri-plain"]
    assert tagged[0].score == pytest.approx(tagged[1].score + 2 * TAG_SCORE)  # each distinct tag once
    # Tags reorder what the words match; a tagged document the words miss stays out.
    assert "pacs" not in doc_ids(tagged)
    assert store.search_text("the", top_k=5, tag_terms=["format:DICOM"]) == []


def test_tags_are_exact_tokens(store):
    hits = store.search_text("brain MRI volumes", top_k=2, filters=ACME, tag_terms=["format:dicom", "DICOM"])
    assert hits[0].score == pytest.approx(hits[1].score)


def test_tags_are_ignored_without_a_tags_field(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "no-tags")
    store.add(PAYLOADS)
    store.finalize()
    hits = store.search_text("brain MRI volumes", top_k=3, filters=ACME, tag_terms=["format:DICOM"])
    assert hits[0].score == pytest.approx(hits[1].score)
    store.close()


def test_filters_hold_against_expansion_and_tags(store):
    hits = store.search_text(
        "brain MRI",
        top_k=20,
        filters=ACME,
        expansion_terms={"myocardial": 1.0, "stroke": 1.0, "aspirin": 1.0},
        tag_terms=["format:DICOM"],
    )
    assert "other" not in doc_ids(hits)
    assert {h.payload["tenant_id"] for h in hits} == {"acme"}
    # The other tenant's document does match all of it without the filter.
    unfiltered = store.search_text(
        "brain MRI", top_k=20, expansion_terms={"myocardial": 1.0}, tag_terms=["format:DICOM"]
    )
    assert doc_ids(unfiltered)[0] == "other"


# -- fetch_documents ------------------------------------------------------------------------


def test_fetch_documents_returns_first_chunks_in_the_given_order(store):
    hits = store.fetch_documents(["long", "stroke", "aspirin"])
    assert doc_ids(hits) == ["long", "stroke", "aspirin"]
    assert [h.chunk_id for h in hits] == ["long#0", "stroke#0", "aspirin#0"]
    assert all(h.score == 0.0 for h in hits)
    assert hits[0].payload == PAYLOADS[-1]


def test_fetch_documents_without_chunk_zero_takes_the_lowest_ordinal(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "ordinals")
    store.add([p for p in PAYLOADS if p["chunk_id"] != "long#0"])
    store.finalize()
    assert [h.chunk_id for h in store.fetch_documents(["long"])] == ["long#2"]
    store.close()


def test_fetch_documents_applies_filters_and_skips_unknown_ids(store):
    ids = ["other", "missing", "mi", "mi", "pacs"]
    assert doc_ids(store.fetch_documents(ids)) == ["other", "mi", "pacs"]
    assert doc_ids(store.fetch_documents(ids, ACME)) == ["mi", "pacs"]
    assert doc_ids(store.fetch_documents(ids, parse_filters({"tags": "format:DICOM"}))) == ["other", "pacs"]
    assert store.fetch_documents([]) == []
    assert store.fetch_documents(["missing"]) == []


# -- format ---------------------------------------------------------------------------------


def test_an_index_of_the_old_format_must_be_rebuilt(tmp_path):
    TantivyLexicalStore.create(tmp_path / "old").close()
    manifest_path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(dict(manifest, format_version=1)))
    with pytest.raises(ValueError, match="rebuild the lexical index"):
        TantivyLexicalStore.open(tmp_path / "old")


def test_filter_fields_of_a_tenant_are_those_its_chunks_have(tmp_path) -> None:
    from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore

    store = TantivyLexicalStore.create(tmp_path / "lex", field_types={"year": "integer", "formats": "keyword"})
    base = {"title": "t", "text": "a viewer", "section": "body"}
    store.add([
        {**base, "chunk_id": "a#0", "doc_id": "a", "tenant_id": "alpha", "year": 2020},
        {**base, "chunk_id": "g#0", "doc_id": "g", "tenant_id": "gamma", "year": 2019, "formats": ["DICOM"]},
    ])  # fmt: skip
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "lex")
    identifiers = {"doc_id", "chunk_id", "tenant_id", "section"}
    assert set(reopened.filter_fields(["alpha"])) == identifiers | {"year"}
    assert set(reopened.filter_fields(["alpha", "gamma"])) == set(reopened.filter_fields()) == identifiers | {"year", "formats"}
    assert set(reopened.filter_fields(["nobody"])) == identifiers


# -- ids read without loading stored documents ----------------------------------------------


def test_hits_carry_ids_and_the_stored_payload_after_writes_change_the_index(tmp_path):
    # Hits read chunk and document ids from a per-reader map: each write must refresh it,
    # or a hit would name the chunk that held its address before.
    store = TantivyLexicalStore.create(tmp_path / "index")
    store.add(PAYLOADS[:4])
    store.finalize()
    assert [(h.doc_id, h.chunk_id) for h in store.search_text("stroke", top_k=5)] == [("stroke", "stroke#0")]
    store.delete(["stroke#0"])
    store.add([payload("stroke-2", 0, "acme", [], "Stroke units", "Stroke units save lives after a stroke.")])
    store.finalize()
    hits = store.search_text("stroke", top_k=5)
    assert [(h.doc_id, h.chunk_id) for h in hits] == [("stroke-2", "stroke-2#0")]
    assert hits[0].payload["text"] == "Stroke units save lives after a stroke."
    assert store.chunk_ids() == {"aspirin#0", "mi#0", "embolism#0", "stroke-2#0"}
    store.close()


def test_each_hit_loads_its_own_payload_and_callers_cannot_change_the_store(store):
    hits = store.search_text("brain MRI volumes", top_k=3, filters=ACME)
    assert [h.payload["chunk_id"] for h in hits] == [h.chunk_id for h in hits]
    assert [h.payload["doc_id"] for h in hits] == [h.doc_id for h in hits]
    hits[0].payload["title"] = "changed by a caller"
    again = store.search_text("brain MRI volumes", top_k=3, filters=ACME)
    assert again[0].payload["title"] == "Brain MRI viewer"


def test_an_id_set_filter_matches_any_of_its_values_and_nothing_else(store):
    listed = parse_filters({"doc_id": ["aspirin", "mri-dicom", "nope"]})
    hits = store.search_text("heart attack MRI", top_k=10, filters=listed)
    assert sorted(doc_ids(hits)) == ["aspirin", "mri-dicom"]
    both_tenants = store.search_text("aspirin", top_k=10, filters=parse_filters({"tenant_id": ["acme", "globex"]}))
    assert sorted(doc_ids(both_tenants)) == ["aspirin", "other"]


def test_a_second_batch_into_a_new_index_replaces(tmp_path):
    # A new index skips per-chunk deletes for its first batch only.
    store = TantivyLexicalStore.create(tmp_path / "index")
    first = payload("stroke", 0, "acme", [], "Stroke", "An early draft about stroke.")
    store.add([first])
    store.add([dict(first, text="The final text about stroke.")])
    store.finalize()
    assert store.count() == 1
    assert [h.payload["text"] for h in store.search_text("stroke", top_k=5)] == ["The final text about stroke."]
    store.close()


def test_an_encoded_payload_is_stored_as_given(tmp_path):
    # A delta build passes the base's saved JSON for the chunks it keeps instead of encoding again.
    store = TantivyLexicalStore.create(tmp_path / "index")
    kept, fresh = PAYLOADS[0], PAYLOADS[2]
    saved = json.dumps(dict(kept, note="as the base saved it"), ensure_ascii=False)
    store.add([kept, fresh], encoded=[saved, None])
    store.finalize()
    by_chunk = {h.chunk_id: h.payload for h in store.search_text("aspirin stroke", top_k=5)}
    assert by_chunk == {kept["chunk_id"]: json.loads(saved), fresh["chunk_id"]: fresh}
    with pytest.raises(ValueError, match="encoded"):
        store.add([kept], encoded=[])
    store.close()
