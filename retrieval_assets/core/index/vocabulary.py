"""Query-expansion vocabulary: terms from names, descriptions and keywords, with embeddings."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import attrgetter
from typing import NamedTuple, TypeVar

import pandas as pd

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback
from retrieval_assets.core.embed.cache import CacheStats, EmbeddingCache, content_hash, encode_with_cache
from retrieval_assets.core.embed.vectors import dense_values
from retrieval_assets.core.io.tables import rows_where
from retrieval_assets.core.settings import VocabularySettings
from retrieval_assets.core.stores.base import Payload

# ``tenants``: the sorted ids of the tenants for whom the term is in the vocabulary, with
# ``tenant_doc_freq`` (their documents holding it, aligned); a search scoped to some tenants
# expands only with their terms and weighs feedback terms by their counts.
VOCABULARY_COLUMNS = ["term", "doc_freq", "sources", "tenants", "tenant_doc_freq", "embedding"]
# Where a term was seen, in the order a vocabulary row lists them.
SOURCES = ("description", "keyword", "name")
# Every term seen, with the number of documents holding it, in all and per source, and per tenant:
# ``tenants`` (sorted) with ``tenant_doc_freq`` (their counts, aligned), so that a delta build can
# remove a document from its tenant's count exactly.
TENANT_COUNT_COLUMNS = ["tenants", "tenant_doc_freq"]
TERM_COUNT_COLUMNS = ["term", "doc_freq", *SOURCES, *TENANT_COUNT_COLUMNS]
_COUNTED = ["doc_freq", *SOURCES]

_WORD = re.compile(r"[a-z][a-z0-9]*(?:[-'][a-z0-9]+)*")
# Function words carry no expansion signal; a short fixed list keeps the vocabulary model-free.
_STOPWORDS = frozenset(
    """a about above after again against all also an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had has
    have having here how however i if in into is it its itself just may might more most much must no nor
    not now of off on once only or other our out over own same shall should since so some such than that
    the their them then there these they this those through thus to too under until up upon use used using
    very via was we were what when where which while who whom why will with within without would yet you
    your""".split()
)
_MIN_TERM_CHARS = 3


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= _MIN_TERM_CHARS and w not in _STOPWORDS]


class TermText(NamedTuple):
    """What terms are read from, per chunk: its title, text and ``keywords`` metadata, and the
    tenant whose document it is."""

    doc_id: str
    tenant_id: str
    title: str
    text: str
    keywords: object


def chunk_texts(chunks: pd.DataFrame) -> Iterator[TermText]:
    """The term texts of a chunk table (``io.tables.CHUNK_COLUMNS``)."""
    columns = ["doc_id", "tenant_id", "title", "text", "metadata"]
    for doc_id, tenant_id, title, text, metadata in chunks[columns].itertuples(index=False):
        yield TermText(doc_id, tenant_id, title, text, json.loads(metadata).get("keywords", []))


def payload_texts(payloads: Iterable[Payload]) -> Iterator[TermText]:
    """The term texts of store payloads (a version's stored chunks)."""
    for payload in payloads:
        yield TermText(
            payload["doc_id"], payload["tenant_id"], payload["title"], payload["text"], payload.get("keywords", [])
        )


def _keywords(value: object) -> list[str]:
    keywords = value if isinstance(value, list) else [value]
    return [phrase for keyword in keywords if (phrase := " ".join(str(keyword).lower().split()))]


class _Tallies(NamedTuple):
    """Documents per term, in all and per source (``_COUNTED``), and per (term, tenant)."""

    columns: dict[str, Counter[str]]
    tenants: Counter[tuple[str, str]]


def _document_terms(texts: Iterable[TermText]) -> Iterator[tuple[str, dict[str, set[str]]]]:
    """Per document, its tenant and the terms each source gave it (title: "name", text:
    "description", keywords).

    Documents are taken one at a time, so memory grows with the distinct terms, not with
    terms x documents (10 million set entries on the ACL Anthology)."""
    document = attrgetter("doc_id", "tenant_id")
    for (_, tenant), doc_texts in groupby(sorted(texts, key=document), key=document):
        terms: dict[str, set[str]] = {source: set() for source in SOURCES}
        for chunk in doc_texts:
            terms["name"].update(words(chunk.title))
            terms["description"].update(words(chunk.text))
            terms["keyword"].update(_keywords(chunk.keywords))
        yield tenant, terms


_Key = TypeVar("_Key")


def _count(counter: Counter[_Key], seen: Iterable[_Key], sign: int) -> None:
    if sign > 0:
        counter.update(seen)
    else:
        counter.subtract(seen)


def _tally(tallies: _Tallies, texts: Iterable[TermText], sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) each document of ``texts`` to or from the counts."""
    for tenant, terms in _document_terms(texts):
        held: set[str] = set().union(*terms.values())
        _count(tallies.columns["doc_freq"], held, sign)
        for source in SOURCES:
            _count(tallies.columns[source], terms[source], sign)
        _count(tallies.tenants, {(term, tenant) for term in held}, sign)


def _counts_frame(tallies: _Tallies) -> pd.DataFrame:
    terms = sorted(term for term, n in tallies.columns["doc_freq"].items() if n > 0)
    per_tenant: dict[str, dict[str, int]] = {term: {} for term in terms}
    for (term, tenant), n in sorted(tallies.tenants.items()):
        if n > 0:
            per_tenant[term][tenant] = n
    return pd.DataFrame(
        {
            "term": terms,
            **{column: [tallies.columns[column][t] for t in terms] for column in _COUNTED},
            "tenants": [list(per_tenant[t]) for t in terms],
            "tenant_doc_freq": [list(per_tenant[t].values()) for t in terms],
        },
        columns=TERM_COUNT_COLUMNS,
    ).astype({column: "int64" for column in _COUNTED})


def count_terms(texts: Iterable[TermText]) -> pd.DataFrame:
    """Every term with the number of documents holding it, in all, per source and per tenant
    (``TERM_COUNT_COLUMNS``)."""
    tallies = _Tallies({column: Counter() for column in _COUNTED}, Counter())
    _tally(tallies, texts, 1)
    return _counts_frame(tallies)


def update_term_counts(counts: pd.DataFrame, removed: Iterable[TermText], added: Iterable[TermText]) -> pd.DataFrame:
    """``counts`` without the ``removed`` documents' terms and with the ``added`` ones': equal to
    ``count_terms`` of the catalog after the change when ``removed`` holds every chunk of the
    changed documents as they were and ``added`` every chunk of them as they are. Only the rows
    of terms the change touches are recounted (ACL: a few hundred of 125k)."""
    change = _Tallies({column: Counter() for column in _COUNTED}, Counter())
    _tally(change, removed, -1)
    _tally(change, added, 1)
    # Every term of a removed or added document, also where the change nets out to zero.
    touched = set(change.columns["doc_freq"])
    is_touched = counts["term"].isin(touched).to_numpy(dtype=bool)
    rows = rows_where(counts, is_touched)
    tallies = _Tallies(
        {column: Counter(dict(zip(rows["term"], rows[column].tolist(), strict=True))) for column in _COUNTED},
        Counter(
            {
                (term, str(tenant)): int(n)
                for term, tenants, held in zip(rows["term"], rows["tenants"], rows["tenant_doc_freq"], strict=True)
                for tenant, n in zip(tenants, held, strict=True)
            }
        ),
    )
    for column in _COUNTED:
        tallies.columns[column].update(change.columns[column])
    tallies.tenants.update(change.tenants)
    recounted, untouched = _counts_frame(tallies), rows_where(counts, ~is_touched)
    if untouched.empty:
        return recounted
    # Untouched rows keep their cells (lists, or numpy arrays as read back from Parquet).
    updated = pd.concat([untouched, recounted], ignore_index=True) if len(recounted) else untouched
    return updated.sort_values("term", kind="stable", ignore_index=True)


def select_terms(counts: pd.DataFrame, settings: VocabularySettings) -> pd.DataFrame:
    """The vocabulary's terms, chosen per tenant from that tenant's own counts: each tenant's
    terms held by at least ``min_doc_freq`` of its documents, its ``max_terms`` most frequent;
    a term is listed once, with the sources it came from and the tenants it was chosen for.
    Whether a tenant's word is offered never depends on another tenant's documents."""
    chosen: dict[str, dict[str, int]] = {}
    by_tenant: dict[str, list[tuple[int, str]]] = {}
    for row in counts.itertuples(index=False):
        for tenant, n in zip(row.tenants, row.tenant_doc_freq, strict=True):
            if n >= settings.min_doc_freq:
                by_tenant.setdefault(str(tenant), []).append((-int(n), row.term))
    for tenant, ranked in by_tenant.items():
        for negative_n, term in sorted(ranked)[: settings.max_terms]:
            chosen.setdefault(term, {})[tenant] = -negative_n
    rows = sorted(
        (row for row in counts.itertuples(index=False) if row.term in chosen),
        key=lambda row: (-row.doc_freq, row.term),
    )
    return pd.DataFrame(
        {
            "term": [row.term for row in rows],
            "doc_freq": [row.doc_freq for row in rows],
            "sources": [[source for source in SOURCES if getattr(row, source) > 0] for row in rows],
            "tenants": [sorted(chosen[row.term]) for row in rows],
            "tenant_doc_freq": [[chosen[row.term][t] for t in sorted(chosen[row.term])] for row in rows],
        }
    )


def term_key(term: str) -> str:
    """A term's key in the terms cache (kept apart from chunk vectors, so that looking terms
    up never reads every chunk's vector)."""
    return content_hash("term", term)


def build_vocabulary(
    counts: pd.DataFrame,
    encoder: DenseEncoder,
    settings: VocabularySettings,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
) -> tuple[pd.DataFrame, CacheStats]:
    """The selected terms of ``counts`` with their embeddings; a term embedded by an earlier
    build is not encoded again."""
    terms = select_terms(counts, settings)
    words = terms["term"].tolist()
    vectors, stats = encode_with_cache(
        [term_key(term) for term in words],
        words,
        lambda block, report: dense_values(encoder.encode_documents(block, progress=report)),
        cache,
        progress=progress,
    )
    terms["embedding"] = vectors["embedding"].to_list() if len(words) else []
    return terms[VOCABULARY_COLUMNS], stats
