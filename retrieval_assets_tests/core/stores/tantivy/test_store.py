"""The tantivy lexical store: BM25 and analysis, query syntax, filters, query-term weighting, expansion
terms, tag boosts, fetch_documents, the index format, and writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from retrieval_assets.core.stores.filters import FilterError, matches_all, parse_filters
from retrieval_assets.core.stores.tantivy.store import (
    IDS_FILE,
    INDEX_DIR,
    MAX_OPEN_WRITERS,
    TAG_SCORE,
    UNNUMBERED_FORMAT_VERSION,
    TantivyLexicalStore,
)
from retrieval_assets_tests.core.stores.embedded_corpus import (
    CHUNK_IDS,
    FAR,
    FAR_ONLY_FILTERS,
    FIELD_TYPES,
    MULTI_FILTERS,
    PAYLOADS,
)

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


def doc_payload(doc_id: str, ordinal: int, tenant: str, tags: list[str], title: str, text: str) -> dict:
    return {
        "doc_id": doc_id,
        "chunk_id": f"{doc_id}#{ordinal}",
        "tenant_id": tenant,
        "section": "body",
        "title": title,
        "text": text,
        "tags": tags,
    }


DOC_PAYLOADS = [doc_payload(*doc) for doc in DOCS]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = TantivyLexicalStore.create(tmp_path_factory.mktemp("tantivy") / "index", field_types={"tags": "keyword"})
    store.add(DOC_PAYLOADS)
    store.finalize()
    yield store
    store.close()


def doc_ids(hits) -> list[str]:
    return [h.payload["doc_id"] for h in hits]


ACME = parse_filters({"tenant_id": "acme"})


@pytest.fixture
def lexical(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "tantivy", field_types=FIELD_TYPES)
    store.add(PAYLOADS)
    store.finalize()
    holder = {"store": store}
    yield tmp_path / "tantivy", holder
    holder["store"].close()


def test_tantivy_bm25_with_stemming(lexical):
    store = lexical[1]["store"]
    hits = store.search_text("running runner", top_k=3)
    assert hits[0].chunk_id == CHUNK_IDS[1]  # "Running" in the title, "Runners" in the text
    assert hits[0].payload == PAYLOADS[1]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert store.search_text("tomato", top_k=1)[0].chunk_id == CHUNK_IDS[FAR]


def test_tantivy_count_and_chunk_ids(lexical):
    store = lexical[1]["store"]
    assert store.count() == len(PAYLOADS)
    assert store.chunk_ids() == set(CHUNK_IDS)


@pytest.mark.parametrize(
    "query",
    [
        'C++ (foo) AND "bar',
        "title:x",
        "text:common^3",
        "*",
        ")(",
        "AND OR NOT",
        '"',
        "\\",
        "a:b:c",
        "[1 TO 2}",
        "-search +vector~2",
    ],
)
def test_tantivy_query_syntax_is_plain_text(lexical, query):
    hits = lexical[1]["store"].search_text(query, top_k=5)
    assert isinstance(hits, list)


def test_tantivy_syntax_characters_are_searched_as_words(lexical):
    store = lexical[1]["store"]
    assert store.search_text('"nearest (neighbour" AND', top_k=1)[0].chunk_id == CHUNK_IDS[0]
    assert store.search_text("title:tomatoes", top_k=1)[0].chunk_id == CHUNK_IDS[FAR]


@pytest.mark.parametrize("query", ["", "   ", "!!! ??? ...", "+-&&||!(){}[]^\"~*?:\\/"])
def test_tantivy_query_without_terms_returns_empty(lexical, query):
    assert lexical[1]["store"].search_text(query, top_k=5) == []


@pytest.mark.parametrize("spec", FAR_ONLY_FILTERS, ids=lambda spec: next(iter(spec)))
def test_tantivy_filter_is_applied_inside_search(lexical, tmp_path, spec):
    store = lexical[1]["store"]
    if "tenant_id" not in spec:
        # FAR's tenant has an index of its own; in one index with the others, as in a single-tenant
        # catalog: "common" is in every text and FAR's text is the longest, so BM25 ranks it last.
        store = TantivyLexicalStore.create(tmp_path / "one-tenant", field_types=FIELD_TYPES)
        store.add([dict(p, tenant_id="acme") for p in PAYLOADS])
        store.finalize()
        assert store.search_text("common", top_k=len(PAYLOADS))[-1].chunk_id == CHUNK_IDS[FAR]
    hits = store.search_text("common", top_k=1, filters=parse_filters(spec))
    assert [h.chunk_id for h in hits] == [CHUNK_IDS[FAR]]
    assert hits[0].score > 0


@pytest.mark.parametrize("spec", MULTI_FILTERS, ids=str)
def test_tantivy_filters_select_exactly_the_matching_docs(lexical, spec):
    store = lexical[1]["store"]
    filters = parse_filters(spec)
    hits = store.search_text("common", top_k=len(PAYLOADS), filters=filters)
    assert {h.chunk_id for h in hits} == {p["chunk_id"] for p in PAYLOADS if matches_all(p, filters)}
    unfiltered = {h.chunk_id: h.score for h in store.search_text("common", top_k=len(PAYLOADS))}
    # Filters add nothing to the BM25 score.
    assert [h.score for h in hits] == pytest.approx([unfiltered[h.chunk_id] for h in hits])


def test_tantivy_filter_on_undeclared_field_is_an_error(lexical):
    with pytest.raises(FilterError, match="not a filter field of this index"):
        lexical[1]["store"].search_text("common", top_k=3, filters=parse_filters({"color": "red"}))
    with pytest.raises(FilterError, match="range filter"):
        lexical[1]["store"].search_text("common", top_k=3, filters=parse_filters({"license": {"gte": 1}}))


def test_tantivy_title_boost(tmp_path):
    in_title = dict(PAYLOADS[0], chunk_id="a", title="zebra", text="animals of africa")
    in_text = dict(PAYLOADS[0], chunk_id="b", title="animals", text="zebra of africa")
    flat = TantivyLexicalStore.create(tmp_path / "flat")
    flat.add([in_title, in_text])
    flat.finalize()
    # One content field by default: a title word counts like any other word.
    scores = {h.chunk_id: h.score for h in flat.search_text("zebra", top_k=2)}
    assert scores["a"] == pytest.approx(scores["b"])
    flat.close()
    boosted = TantivyLexicalStore.create(tmp_path / "boost", title_boost=0.5)
    boosted.add([in_title, in_text])
    boosted.close()
    reopened = TantivyLexicalStore.open(tmp_path / "boost")
    assert [h.chunk_id for h in reopened.search_text("zebra", top_k=2)] == ["a", "b"]
    reopened.close()
    with pytest.raises(ValueError, match="title_boost"):
        TantivyLexicalStore.create(tmp_path / "bad", title_boost=-1.0)


def test_an_unstemmed_store_matches_words_only_as_written(tmp_path):
    documents = [dict(PAYLOADS[0], chunk_id="a", title="", text="the runners"), dict(PAYLOADS[0], chunk_id="b",
                 title="", text="a running race")]
    unstemmed = TantivyLexicalStore.create(tmp_path / "none", stemmer="none")
    unstemmed.add(documents)
    unstemmed.close()
    # Reopened, the store analyses queries as it indexed: with the stemmer its manifest records.
    reopened = TantivyLexicalStore.open(tmp_path / "none")
    assert reopened.stemmer == "none"
    assert [h.chunk_id for h in reopened.search_text("runners", top_k=5)] == ["a"]
    assert reopened.search_text("runner", top_k=5) == []
    assert reopened.search_text("the", top_k=5) == []  # stop words are still dropped
    reopened.close()
    stemmed = TantivyLexicalStore.create(tmp_path / "english")
    stemmed.add(documents)
    stemmed.finalize()
    assert stemmed.stemmer == "english"
    assert [h.chunk_id for h in stemmed.search_text("runner", top_k=5)] == ["a"]
    stemmed.close()
    with pytest.raises(ValueError, match="stemmer must be one of"):
        TantivyLexicalStore.create(tmp_path / "bad", stemmer="klingon")  # type: ignore[arg-type]


def test_tantivy_reopen_and_replace(lexical):
    path, holder = lexical
    filters = parse_filters({"tenant_id": "acme"})
    before = holder["store"].search_text("common search", top_k=5, filters=filters)
    holder["store"].close()
    holder["store"] = store = TantivyLexicalStore.open(path)
    after = store.search_text("common search", top_k=5, filters=filters)
    assert [(h.chunk_id, h.payload) for h in after] == [(h.chunk_id, h.payload) for h in before]
    assert [h.score for h in after] == pytest.approx([h.score for h in before])
    store.add([dict(PAYLOADS[0], text="Graph indexes for zeppelin navigation.")])
    store.finalize()
    assert store.count() == len(PAYLOADS)
    assert store.search_text("zeppelin", top_k=3)[0].chunk_id == CHUNK_IDS[0]
    assert CHUNK_IDS[0] not in {h.chunk_id for h in store.search_text("HNSW", top_k=3)}


def test_tantivy_delete_removes_chunks_after_finalize(lexical):
    path, holder = lexical
    store = holder["store"]
    store.delete([CHUNK_IDS[1], "no-such-chunk#0"])
    assert store.search_text("running", top_k=1)[0].chunk_id == CHUNK_IDS[1]  # not yet committed
    store.finalize()
    store.close()
    holder["store"] = store = TantivyLexicalStore.open(path)
    assert store.count() == len(PAYLOADS) - 1 and store.chunk_ids() == set(CHUNK_IDS) - {CHUNK_IDS[1]}
    assert store.search_text("running runner", top_k=3) == []
    assert store.fetch_documents([PAYLOADS[1]["doc_id"]]) == []


def test_tantivy_one_writer_many_readers(lexical):
    path, holder = lexical
    holder["store"].add([PAYLOADS[0]])  # now holds the index's writer lock
    reader = TantivyLexicalStore.open(path)
    assert reader.count() == len(PAYLOADS)
    with pytest.raises(RuntimeError, match="already has a writer"):
        reader.add([PAYLOADS[1]])
    reader.close()


def test_tantivy_create_refuses_non_empty_dir(lexical):
    path, holder = lexical
    with pytest.raises(FileExistsError):
        TantivyLexicalStore.create(path)


def test_tantivy_filters_on_fields_whose_names_tantivy_rejects(tmp_path):
    # Cleaning flattens nested metadata and tool relations into dotted keys.
    fields = {"relations.requires": "keyword", "payload_json": "keyword", "meta data": "integer"}
    store = TantivyLexicalStore.create(tmp_path / "odd", field_types=fields)
    base = {"section": "body", "title": "", "tenant_id": "t"}
    store.add([
        {**base, "chunk_id": "a#0", "doc_id": "a", "text": "aligner", "relations.requires": ["samtools"],
         "meta data": 1, "payload_json": "x"},
        {**base, "chunk_id": "b#0", "doc_id": "b", "text": "aligner", "relations.requires": ["htslib"], "meta data": 5},
    ])
    store.finalize()
    hits = store.search_text("aligner", 5, parse_filters({"relations.requires": "samtools", "payload_json": "x"}))
    assert [h.payload["doc_id"] for h in hits] == ["a"]
    ranged = store.search_text("aligner", 5, parse_filters({"meta data": {"gte": 2}}))
    assert [h.payload["doc_id"] for h in ranged] == ["b"]
    store.close()
    reopened = TantivyLexicalStore.open(tmp_path / "odd")
    assert [h.payload["doc_id"] for h in reopened.search_text("aligner", 5, parse_filters({"meta data": 1}))] == ["a"]


def test_repeated_query_words_weigh_more(store):
    # Lucene sums one clause per token: "stroke" twice outweighs "embolism" once.
    assert doc_ids(store.search_text("stroke stroke embolism", top_k=2, filters=ACME)) == ["stroke", "embolism"]
    assert doc_ids(store.search_text("stroke embolism embolism", top_k=2, filters=ACME)) == ["embolism", "stroke"]


def test_stop_words_are_not_searched(store):
    assert store.search_text("the of a to", top_k=5) == []
    with_stop_words = store.search_text("the risk of a stroke", top_k=3)
    assert [h.score for h in with_stop_words] == pytest.approx([h.score for h in store.search_text("risk stroke", 3)])


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
    store.add(DOC_PAYLOADS)
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
    assert "other" in doc_ids(unfiltered)


def test_fetch_documents_returns_first_chunks_in_the_given_order(store):
    hits = store.fetch_documents(["long", "stroke", "aspirin"])
    assert doc_ids(hits) == ["long", "stroke", "aspirin"]
    assert [h.chunk_id for h in hits] == ["long#0", "stroke#0", "aspirin#0"]
    assert all(h.score == 0.0 for h in hits)
    assert hits[0].payload == DOC_PAYLOADS[-1]


def test_fetch_documents_without_chunk_zero_takes_the_lowest_ordinal(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "ordinals")
    store.add([p for p in DOC_PAYLOADS if p["chunk_id"] != "long#0"])
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


def test_an_index_of_the_old_format_must_be_rebuilt(tmp_path):
    TantivyLexicalStore.create(tmp_path / "old").close()
    manifest_path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(dict(manifest, format_version=1)))
    with pytest.raises(ValueError, match="rebuild the lexical index"):
        TantivyLexicalStore.open(tmp_path / "old")


def test_filter_fields_of_a_tenant_are_those_its_chunks_have(tmp_path) -> None:
    from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore

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
    assert (
        set(reopened.filter_fields(["alpha", "gamma"]))
        == set(reopened.filter_fields())
        == identifiers | {"year", "formats"}
    )
    assert set(reopened.filter_fields(["nobody"])) == identifiers


def test_hits_carry_ids_and_the_stored_payload_after_writes_change_the_index(tmp_path):
    # Hits read chunk and document ids by row number: a replaced chunk's new row must name it,
    # and the deleted row must not be reached.
    store = TantivyLexicalStore.create(tmp_path / "index")
    store.add(DOC_PAYLOADS[:4])
    store.finalize()
    assert [(h.doc_id, h.chunk_id) for h in store.search_text("stroke", top_k=5)] == [("stroke", "stroke#0")]
    store.delete(["stroke#0"])
    store.add([doc_payload("stroke-2", 0, "acme", [], "Stroke units", "Stroke units save lives after a stroke.")])
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
    first = doc_payload("stroke", 0, "acme", [], "Stroke", "An early draft about stroke.")
    store.add([first])
    store.add([dict(first, text="The final text about stroke.")])
    store.finalize()
    assert store.count() == 1
    assert [h.payload["text"] for h in store.search_text("stroke", top_k=5)] == ["The final text about stroke."]
    store.close()


def test_an_encoded_payload_is_stored_as_given(tmp_path):
    # A delta build passes the base's saved JSON for the chunks it keeps instead of encoding again.
    store = TantivyLexicalStore.create(tmp_path / "index")
    kept, fresh = DOC_PAYLOADS[0], DOC_PAYLOADS[2]
    saved = json.dumps(dict(kept, note="as the base saved it"), ensure_ascii=False)
    store.add([kept, fresh], encoded=[saved, None])
    store.finalize()
    by_chunk = {h.chunk_id: h.payload for h in store.search_text("aspirin stroke", top_k=5)}
    assert by_chunk == {kept["chunk_id"]: json.loads(saved), fresh["chunk_id"]: fresh}
    with pytest.raises(ValueError, match="encoded"):
        store.add([kept], encoded=[])
    store.close()


def read_ids(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def rewrite_ids(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def test_hit_ids_come_from_each_index_ids_file_by_row_number(tmp_path):
    # Not from the stored document: ids rewritten in ids.arrow are the ones hits and chunk_ids() name.
    store = TantivyLexicalStore.create(tmp_path / "numbered")
    store.add(DOC_PAYLOADS)
    store.close()
    files = sorted((tmp_path / "numbered" / INDEX_DIR).glob(f"*/{IDS_FILE}"))
    assert len(files) == len({p["tenant_id"] for p in DOC_PAYLOADS})
    for path in files:
        table = read_ids(path)
        marked = {
            name: pa.array([f"row{i}:{v}" for i, v in enumerate(table.column(name).to_pylist())])
            for name in table.column_names
        }
        rewrite_ids(path, pa.table(marked))
    reopened = TantivyLexicalStore.open(tmp_path / "numbered")
    hit = reopened.search_text("stroke", top_k=1)[0]
    assert hit.chunk_id.endswith(":stroke#0") and hit.doc_id.endswith(":stroke")
    assert hit.payload["chunk_id"] == "stroke#0"  # the stored payload is as written
    assert {chunk_id.split(":")[1] for chunk_id in reopened.chunk_ids()} == {p["chunk_id"] for p in DOC_PAYLOADS}


def test_rows_of_replaced_chunks_are_new_and_the_old_ones_stay_unreached(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "index")
    store.add(DOC_PAYLOADS[:2])
    store.finalize()
    store.add([dict(DOC_PAYLOADS[0], text="Aspirin again, replaced.")])
    store.close()
    (path,) = (tmp_path / "index" / INDEX_DIR).glob(f"*/{IDS_FILE}")
    assert read_ids(path).column("chunk_id").to_pylist() == ["aspirin#0", "mi#0", "aspirin#0"]
    hits = TantivyLexicalStore.open(tmp_path / "index").search_text("aspirin", top_k=5)
    assert [(h.chunk_id, h.payload["text"]) for h in hits] == [("aspirin#0", "Aspirin again, replaced.")]


def test_a_writer_closed_to_make_room_names_its_hits_before_finalize(tmp_path):
    # Past MAX_OPEN_WRITERS tenants a writer is committed early, so a reader can show its
    # documents before finalize saves their ids: they are named from the rows just numbered.
    tenants = [f"t{i}" for i in range(MAX_OPEN_WRITERS + 2)]
    payloads = [
        doc_payload(f"d{i}", 0, tenant, [], "Stroke", f"Stroke care in ward {i}.") for i, tenant in enumerate(tenants)
    ]
    store = TantivyLexicalStore.create(tmp_path / "index")
    store.add(payloads[:1])
    store.add(payloads[1:])
    for future in list(store._closing.values()):
        future.result()
    for part in store._parts.values():
        part.index.reload()
    early = {h.chunk_id for h in store.search_text("stroke", top_k=20)}
    assert early and early <= {p["chunk_id"] for p in payloads}
    store.close()
    assert {h.chunk_id for h in store.search_text("stroke", top_k=20)} == {p["chunk_id"] for p in payloads}


def test_a_linked_index_written_to_leaves_its_base_ids_file_as_it_was(tmp_path):
    base = TantivyLexicalStore.create(tmp_path / "base")
    base.add(DOC_PAYLOADS)
    base.close()
    (base_ids,) = [p for p in (tmp_path / "base" / INDEX_DIR).glob(f"*/{IDS_FILE}") if "acme" in p.parent.name]
    before = base_ids.read_bytes()
    linked = TantivyLexicalStore.open_linked(tmp_path / "base", tmp_path / "linked", {"acme", "globex"})
    linked.add([doc_payload("stroke-2", 0, "acme", [], "Stroke units", "Stroke units save lives.")])
    linked.close()
    assert base_ids.read_bytes() == before
    assert {h.chunk_id for h in linked.search_text("stroke", top_k=5, filters=ACME)} == {"stroke#0", "stroke-2#0"}
    assert [
        h.chunk_id for h in TantivyLexicalStore.open(tmp_path / "base").search_text("stroke", top_k=5, filters=ACME)
    ] == ["stroke#0"]


def test_an_index_without_row_numbers_reads_ids_from_stored_documents(tmp_path):
    # Format 4, written before row numbers: no id_row value, no ids file; it still answers.
    TantivyLexicalStore.create(tmp_path / "index").close()
    manifest_path = tmp_path / "index" / "manifest.json"
    manifest_path.write_text(
        json.dumps(dict(json.loads(manifest_path.read_text()), format_version=UNNUMBERED_FORMAT_VERSION))
    )
    store = TantivyLexicalStore.open(tmp_path / "index")
    store.add(DOC_PAYLOADS)
    store.close()
    assert not list((tmp_path / "index" / INDEX_DIR).glob(f"*/{IDS_FILE}"))
    reopened = TantivyLexicalStore.open(tmp_path / "index")
    assert [(h.chunk_id, h.doc_id) for h in reopened.search_text("stroke", top_k=5, filters=ACME)] == [
        ("stroke#0", "stroke")
    ]
    assert reopened.chunk_ids() == {p["chunk_id"] for p in DOC_PAYLOADS}


def test_an_index_missing_its_ids_file_names_it(tmp_path):
    store = TantivyLexicalStore.create(tmp_path / "index")
    store.add(DOC_PAYLOADS[:1])
    store.close()
    (path,) = (tmp_path / "index" / INDEX_DIR).glob(f"*/{IDS_FILE}")
    path.unlink()
    with pytest.raises(FileNotFoundError, match=f"has no {IDS_FILE}: rebuild the lexical index"):
        TantivyLexicalStore.open(tmp_path / "index")
