"""Known-item gold: seeded, stratified, judged by the document and its duplicates."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from retrieval_assets.core.evaluation.gold.known_item import (
    STOPWORDS,
    TOKEN,
    allocate,
    generate_known_item_gold,
    word_forms,
)
from retrieval_assets.core.evaluation.gold.model import GeneratedGold, fingerprint_of
from retrieval_assets.core.evaluation.tuning import gold_fingerprint
from retrieval_assets_tests.core.evaluation.gold.corpus import documents

AT = "2026-01-01T00:00:00+00:00"


def test_same_documents_and_seed_give_byte_identical_gold() -> None:
    frame = documents({"a": 300, "b": 200})
    first = generate_known_item_gold(frame, seed=5, created_at=AT).model_dump_json()
    shuffled = frame.sample(frac=1.0, random_state=1)  # the input's order does not matter
    assert generate_known_item_gold(shuffled, seed=5, created_at=AT).model_dump_json() == first
    other = generate_known_item_gold(frame, seed=6, created_at=AT)
    assert other.queries != GeneratedGold.model_validate_json(first).queries


def test_allocation_is_proportional_with_one_per_stratum() -> None:
    assert allocate([1000, 10, 1], 50) == [48, 1, 1]
    assert sum(allocate([7, 5, 3], 15)) == 15 and allocate([7, 5, 3], 15) == [7, 5, 3]
    assert allocate([5, 9, 1, 9], 2) == [0, 1, 0, 1]  # more strata than draws: the largest


def test_sample_is_stratified_by_tenant_and_source() -> None:
    frame = documents({"big": 600, "mid": 300, "tiny": 3}, sources=("wiki", "forum", "mail"))
    gold = generate_known_item_gold(frame, size=300, created_at=AT)
    assert len(gold.queries) == 300 and gold.stats["strata"] == 9
    per_tenant = Counter(gold.tenant_of.values())
    assert per_tenant["big"] == pytest.approx(600 / 903 * 300, abs=2)
    assert per_tenant["mid"] == pytest.approx(300 / 903 * 300, abs=2)
    assert per_tenant["tiny"] >= 1
    sources = Counter(frame.set_index("doc_id").loc[doc, "metadata"] for doc in gold.query_doc.values())
    assert len(sources) == 3 and max(sources.values()) - min(sources.values()) <= 3
    assert all(gold.query_doc[qid].startswith(tenant) for qid, tenant in gold.tenant_of.items())


def test_exact_duplicates_are_judged_relevant_and_drawn_once() -> None:
    frame = documents({"a": 20})
    copy = frame.iloc[[3]].assign(doc_id="a-copy", text="  " + frame.at[3, "text"].upper() + " ")
    gold = generate_known_item_gold(pd.concat([frame, copy]), size=50, min_size=1, created_at=AT)
    assert gold.stats["duplicates"] == 1 and len(gold.queries) == 20
    (qid,) = [q for q, rel in gold.qrels.items() if "a-0003" in rel]
    assert gold.qrels[qid] == {"a-0003": 1, "a-copy": 1} and gold.query_doc[qid] == "a-0003"


def test_short_documents_are_skipped_and_counted() -> None:
    frame = documents({"a": 30})
    short = frame.iloc[:4].assign(
        doc_id=lambda f: "short-" + f["doc_id"], title="", text="graph1 vector2 the of 42 index3"
    )
    gold = generate_known_item_gold(pd.concat([frame, short]), size=100, created_at=AT)
    assert gold.stats["too_short"] == 4 and gold.stats["eligible"] == 30
    assert not any(doc.startswith("short-") for doc in gold.query_doc.values())
    assert len(gold.queries) == 30 and "fewer than the 200 wanted" in gold.warnings[0]


def test_at_least_min_size_queries_where_the_corpus_allows() -> None:
    gold = generate_known_item_gold(documents({"a": 250}), size=50, created_at=AT)
    assert len(gold.queries) == 200 and not gold.warnings


def test_queries_are_titles_or_sampled_content_words() -> None:
    frame = documents({"a": 400}, words=60)
    gold = generate_known_item_gold(frame, size=300, created_at=AT)
    by_id = frame.set_index("doc_id")
    sources = Counter(gold.query_source.values())
    assert sources["title"] == 150 and sources["terms"] == 150
    for qid, query in gold.queries.items():
        document = by_id.loc[gold.query_doc[qid]]
        if gold.query_source[qid] == "title":
            assert query == document["title"] and query != "Introduction"
            continue
        terms = query.split()
        words = TOKEN.findall(f"{document['title']} {document['text']}".casefold())
        assert 2 <= len(terms) <= 6 and len(set(terms)) == len(terms)
        assert all(t in words and t not in STOPWORDS and not t.isdigit() for t in terms)
        assert terms == sorted(terms, key=words.index)  # in the document's order


# Each document uses one form of four stems; the collection holds the others.
FORMS = [("vaccination", "vaccinated"), ("infections", "infection"), ("studies", "studied"), ("mutations", "mutated")]


def test_sampled_terms_take_other_forms_of_their_stem_from_the_collection() -> None:
    rows = [
        {"doc_id": f"d{i}", "title": "", "tenant_id": "a", "metadata": "{}",
         "text": " ".join(pair[i % 2] for pair in FORMS) + " " + " ".join(f"word{i}x{j}" for j in range(6))}
        for i in range(40)
    ]
    frame = pd.DataFrame(rows)
    assert word_forms(Counter(TOKEN.findall(" ".join(frame["text"]))))["vaccination"] == ["vaccinated"]
    always = generate_known_item_gold(frame, size=40, min_size=1, variant_share=1.0, created_at=AT)
    never = generate_known_item_gold(frame, size=40, min_size=1, variant_share=0.0, created_at=AT)
    assert len(always.queries) == 40 and never.stats["varied_terms"] == 0 and always.stats["varied_terms"] > 0
    other_form = {form: other for pair in FORMS for form, other in (pair, pair[::-1])}
    by_id = frame.set_index("doc_id")
    for qid, query in always.queries.items():
        own = by_id.loc[always.query_doc[qid], "text"].split()
        # Every term with another form in the collection comes in that form; numbered words have none.
        assert all(other_form[term] in own for term in query.split() if term in other_form)
        assert all(term in own for term in query.split() if term not in other_form)
    assert "50%" in generate_known_item_gold(frame, created_at=AT).method


def test_fingerprint_covers_queries_and_judgements_only() -> None:
    gold = generate_known_item_gold(documents({"a": 250}), created_at=AT)
    later = generate_known_item_gold(documents({"a": 250}), created_at="2027-06-01T00:00:00+00:00")
    assert later.fingerprint == gold.fingerprint
    assert gold.fingerprint == fingerprint_of(gold.queries, gold.qrels)
    assert GeneratedGold.model_validate_json(gold.model_dump_json()).fingerprint == gold.fingerprint
    assert gold_fingerprint(gold.as_gold_set()) == gold.fingerprint[:16]
    assert all(qid.startswith("ki-") and len(qid) == 11 for qid in gold.queries)
