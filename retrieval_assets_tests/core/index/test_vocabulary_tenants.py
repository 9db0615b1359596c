"""The expansion vocabulary knows which tenants hold each term: its counts, kept per tenant, update
exactly as a recount does, and a search scoped to some tenants never expands with a term that
only another tenant's documents hold."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.configured import dense_encoder_for
from retrieval_assets.core.embed.steps import embedding_cache
from retrieval_assets.core.index.vocabulary import (
    build_vocabulary,
    chunk_texts,
    count_terms,
    select_terms,
    update_term_counts,
)
from retrieval_assets.core.io.tables import chunks_to_frame
from retrieval_assets.core.models import Chunk
from retrieval_assets.core.retrieval.expansion import VocabularyIndex
from retrieval_assets.core.settings import ModelSettings, VocabularySettings

# Near-identical catalogs, except for the words only one tenant uses.
DOCUMENTS = {
    "a1": ("alpha", "Tumour viewer", "Displays tumour scans and genome tracks."),
    "a2": ("alpha", "Scan aligner", "Aligns genome scans."),
    "b1": ("beta", "Neoplasm viewer", "Displays neoplasm scans and genome tracks."),
    "b2": ("beta", "Zebrafish atlas", "Maps zebrafish genome scans."),
}


def _chunks(documents: dict[str, tuple[str, str, str]]) -> pd.DataFrame:
    return chunks_to_frame(
        Chunk(
            chunk_id=f"{doc_id}#{n}",
            doc_id=doc_id,
            ordinal=n,
            tenant_id=tenant,
            title=title,
            text=part,
            metadata={"keywords": [title.split()[0]]},
            content_hash=f"{doc_id}-{n}-{part}",
        )
        for doc_id, (tenant, title, text) in documents.items()
        for n, part in enumerate(text.split(" and "))
    )


@pytest.fixture(scope="module")
def encoder() -> DenseEncoder:
    return dense_encoder_for(ModelSettings())


@pytest.fixture(scope="module")
def vocabulary(encoder: DenseEncoder, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    cache = embedding_cache(tmp_path_factory.mktemp("cache"), "terms", encoder)
    counts = count_terms(chunk_texts(_chunks(DOCUMENTS)))
    frame, _ = build_vocabulary(counts, encoder, VocabularySettings(min_doc_freq=1), cache)
    return frame


def test_each_term_lists_the_tenants_whose_documents_hold_it(vocabulary: pd.DataFrame) -> None:
    tenants = dict(zip(vocabulary["term"], vocabulary["tenants"].map(list), strict=True))
    assert tenants["genome"] == tenants["scans"] == tenants["viewer"] == ["alpha", "beta"]
    assert tenants["tumour"] == tenants["aligner"] == ["alpha"]
    assert tenants["neoplasm"] == tenants["zebrafish"] == ["beta"]
    # doc_freq stays the count over every tenant: pseudo-relevance feedback uses it as a statistic.
    assert dict(zip(vocabulary["term"], vocabulary["doc_freq"], strict=True))["genome"] == 4
    counts = count_terms(chunk_texts(_chunks(DOCUMENTS))).set_index("term")
    assert (list(counts.at["scans", "tenants"]), list(counts.at["scans", "tenant_doc_freq"])) == (
        ["alpha", "beta"],
        [2, 2],
    )


def test_neighbours_of_a_scoped_query_are_terms_its_tenants_hold(
    vocabulary: pd.DataFrame, encoder: DenseEncoder
) -> None:
    index = VocabularyIndex.from_frame(vocabulary)
    # A threshold every term reaches: what comes back is decided by the tenants alone.
    options = {"threshold": -0.9, "max_terms": 100, "weight": 1.0}
    everything = index.neighbours("tumor", encoder, **options)
    assert {"neoplasm", "zebrafish", "tumour"} <= set(everything)
    alpha = index.neighbours("tumor", encoder, tenants=["alpha"], **options)
    assert "neoplasm" not in alpha and "zebrafish" not in alpha and "tumour" in alpha
    held = dict(zip(vocabulary["term"], vocabulary["tenants"].map(set), strict=True))
    assert set(alpha) == {term for term in everything if "alpha" in held[term]}
    # Scores do not change with the scope, only which terms may be returned.
    assert alpha == {term: score for term, score in everything.items() if term in alpha}
    assert index.neighbours("tumor", encoder, tenants={"alpha", "beta"}, **options) == everything
    assert index.neighbours("tumor", encoder, tenants=["gamma"], **options) == {}
    assert index.neighbours("tumor", encoder, tenants=[], **options) == {}


def test_a_vocabulary_without_tenants_expands_no_scoped_query(
    vocabulary: pd.DataFrame, encoder: DenseEncoder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "vocabulary.parquet"
    vocabulary.drop(columns="tenants").to_parquet(path)  # as built before terms knew their tenants
    old, new = VocabularyIndex.load(path), VocabularyIndex.from_frame(vocabulary)
    options = {"threshold": 0.3, "max_terms": 5, "weight": 0.5}
    assert old.neighbours("tumor scans", encoder, **options) == new.neighbours("tumor scans", encoder, **options)
    with caplog.at_level(logging.WARNING):
        assert old.neighbours("tumor scans", encoder, tenants=["alpha"], **options) == {}
        assert old.neighbours("genome", encoder, tenants=["beta"], **options) == {}
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


_CATALOG = st.dictionaries(
    st.sampled_from([f"d{n}" for n in range(6)]),
    st.tuples(
        st.sampled_from(["alpha", "beta", "gamma"]),
        st.sampled_from(["Tumour viewer", "Genome atlas", "Scan tool"]),
        st.lists(st.sampled_from(["genome", "tumour", "scans", "zebrafish", "reads"]), min_size=1, max_size=4).map(
            " and ".join
        ),
    ),
    max_size=6,
)


@given(before=_CATALOG, after=_CATALOG)
def test_updated_counts_equal_a_recount_across_upserts_deletes_and_tenant_moves(
    before: dict[str, tuple[str, str, str]], after: dict[str, tuple[str, str, str]]
) -> None:
    changed = {doc_id for doc_id in {*before, *after} if before.get(doc_id) != after.get(doc_id)}
    old, new = _chunks(before), _chunks(after)
    updated = update_term_counts(
        count_terms(chunk_texts(old)),
        chunk_texts(old[old["doc_id"].isin(changed)]),
        chunk_texts(new[new["doc_id"].isin(changed)]),
    )
    pd.testing.assert_frame_equal(updated, count_terms(chunk_texts(new)))


def test_which_terms_a_tenant_gets_and_their_weights_come_from_its_own_documents() -> None:
    """"genome" is in one alpha document and five beta ones: with two documents needed, alpha is
    not offered it (as if beta had none), beta is; feedback weights count the scope's documents."""
    documents = {"a1": ("alpha", "Scan viewer", "Displays genome scans."), "a2": ("alpha", "Scan tool", "Scans.")}
    documents |= {f"b{n}": ("beta", f"Tool {n}", "Maps genome reads.") for n in range(5)}
    counts = count_terms(chunk_texts(_chunks(documents)))
    settings = VocabularySettings(min_doc_freq=2)
    alone = count_terms(chunk_texts(_chunks({k: v for k, v in documents.items() if v[0] == "alpha"})))
    selected = select_terms(counts, settings).set_index("term")
    assert list(selected.loc["genome", "tenants"]) == ["beta"] and list(selected.loc["scan", "tenants"]) == ["alpha"]
    assert set(select_terms(alone, settings)["term"]) == {
        term for term, tenants in selected["tenants"].items() if "alpha" in tenants
    }
    frame = select_terms(counts, settings).assign(embedding=lambda f: [[1.0, 0.0]] * len(f))
    vocabulary = VocabularyIndex.from_frame(frame)
    assert vocabulary.doc_freq_in(["beta"])["genome"] == 5 and "genome" not in vocabulary.doc_freq_in(["alpha"])
    assert vocabulary.doc_freq_in(None)["genome"] == 6
    legacy = VocabularyIndex.from_frame(frame.drop(columns=["tenant_doc_freq"]))
    assert legacy.doc_freq_in(["alpha"]) is None  # no per-tenant counts: a scoped query gets no feedback terms
