"""Known-item gold: one simulated query per sampled document, the document itself its answer.

Method (Azzopardi, de Rijke & Balog, "Building simulated queries for known-item topics", SIGIR
2007): a user who remembers a document types a few of its words. The document is drawn first,
then the query:

* Sampling. Documents are sorted by (tenant_id, doc_id) and drawn with ``numpy``'s seeded
  generator, stratified by tenant (and by ``metadata["source"]`` where a document has one):
  proportional allocation by largest deficit, at least one document per stratum while there are
  fewer strata than queries. Exact duplicates (same normalised text) are drawn once. Documents
  with fewer than ``min_terms`` distinct content words (not stopwords, not numbers, two
  characters or more) cannot make a query and are counted as ``too_short``.
* Queries. Up to ``title_share`` (half) of the queries are the document's title where the title
  is informative: four or more words with content, not the document's id, and no other document
  has it (a title many documents share, such as "Introduction" or "README", finds none of them).
  The others are term-sampled: the length is 2 + Poisson(``mean_extra_terms``), at most 6, and
  the terms are drawn without replacement from the document's distinct content words with
  probability proportional to tf·idf (the paper's combination of its "popular" and
  "discriminative" selections), then put in the order they first occur in the document.
* Word forms. A user remembers a word, not the form the document used: each sampled term is,
  with probability ``variant_share``, replaced by another form of the same English Snowball stem
  that occurs in the collection ("vaccinated" for "vaccination"), drawn in proportion to its
  document frequency. Only words the collection holds are used, so a corpus in another language
  keeps its own words; a lexical index that stops conflating forms (a tokenizer change, a lost
  stemmer) then loses these queries, as it would lose real users'.
* Judgements. The document and its exact duplicates, grade 1.

Bias. Every word of a known-item query is in its document, which favours lexical retrieval
(BM25) over dense retrieval: real users paraphrase. The method limits this three ways, none of
which removes it: terms are sampled by tf·idf rather than taken as the top-idf terms (which
would be the rare words BM25 weights most); half the queries are titles, phrased by the author
rather than chosen by term statistics; and ``llm.with_llm_questions`` can replace queries with
questions a model wrote in its own words. Known-item gold has one answer per query, so it
measures finding a document, not ranking many relevant ones. Use it to catch regressions and
compare configurations, and check its ranking of configurations against real gold where some
exists (``agreement.kendall_tau``).

Deterministic: the same documents and seed give byte-identical output (no set order, no
``hash()``). 100,000 documents of 900 characters take about 15 s of CPU (2-vCPU AMD EPYC), most
of it the one tokenising pass that counts document frequencies and content words.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import tantivy

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.evaluation.gold.model import GeneratedGold, QuerySource, normalise, now_iso

# Words of two characters or more: single characters are never content, and skipping them here is cheap.
TOKEN = re.compile(r"[^\W_]{2,}")
# English function words (NLTK's stopword list, without its contraction fragments), plus a few
# words that carry no topic in catalog text.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each etc few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just may me might more
    most must my myself no nor not now of off on once only or other our ours ourselves out over own per same
    shall she should so some such than that the their theirs them themselves then there these they this those
    through to too under until up us use used using very via was we were what when where which while who whom
    why will with would you your yours yourself yourselves
    """.split()
)
MAX_QUERY_TERMS = 6
TITLE_MIN_WORDS = 4
VARIANT_SHARE = 0.5


def _is_content(term: str) -> bool:
    return term not in STOPWORDS and not term.isdigit()


def _terms(text: str) -> list[str]:
    return TOKEN.findall(text.casefold())


def _source_of(metadata: str) -> str:
    """``metadata["source"]`` when it is a string; the substring test skips parsing most documents."""
    if '"source"' not in metadata:
        return ""
    source = json.loads(metadata).get("source")
    return source if isinstance(source, str) else ""


def word_forms(document_frequency: Mapping[str, int]) -> dict[str, list[str]]:
    """Content word -> the collection's other forms of its English Snowball stem (in sorted
    order), for the words that have any."""
    stemmer = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw()).filter(tantivy.Filter.stemmer("english")).build()
    by_stem: dict[str, list[str]] = {}
    for term in sorted(document_frequency):
        if _is_content(term):
            by_stem.setdefault(stemmer.analyze(term)[0], []).append(term)
    return {
        form: [other for other in forms if other != form]
        for forms in by_stem.values()
        if len(forms) > 1
        for form in forms
    }


def _informative_title(title: str, doc_id: str) -> bool:
    words = [w for w in title.split() if any(_is_content(t) for t in _terms(w))]
    return len(words) >= TITLE_MIN_WORDS and normalise(title) != normalise(doc_id)


def allocate(sizes: Sequence[int], total: int) -> list[int]:
    """Proportional allocation of ``total`` draws over strata of these sizes, at least one per
    stratum when there are no more strata than draws (else one each for the largest strata),
    the rest one at a time to the stratum furthest below its proportional share."""
    counts = np.asarray(sizes, dtype=np.int64)
    allocation = np.zeros(len(counts), dtype=np.int64)
    first = np.argsort(-counts, kind="stable")[: min(total, len(counts))]
    allocation[first] = 1
    quota = total * counts / counts.sum()
    for _ in range(total - int(allocation.sum())):
        deficit = np.where(allocation < counts, quota - allocation, -np.inf)
        allocation[int(np.argmax(deficit))] += 1
    return allocation.tolist()


def generate_known_item_gold(
    documents: pd.DataFrame,
    *,
    seed: int = 13,
    size: int = 300,
    min_size: int = 200,
    min_terms: int = 8,
    title_share: float = 0.5,
    mean_extra_terms: float = 1.5,
    variant_share: float = VARIANT_SHARE,
    created_at: str | None = None,
) -> GeneratedGold:
    """Known-item gold of ``max(size, min_size)`` queries, or as many as the documents allow (a
    warning says when that is fewer than ``min_size``). ``documents`` is a cleaned documents
    frame (doc_id, title, text, tenant_id, metadata; doc ids unique); ``created_at`` defaults to
    now and is not part of the fingerprint."""
    rng = np.random.default_rng(seed)
    frame = documents.sort_values(["tenant_id", "doc_id"], kind="stable").reset_index(drop=True)
    doc_ids = frame["doc_id"].astype(str).tolist()
    tenants = frame["tenant_id"].astype(str).tolist()
    titles = frame["title"].fillna("").astype(str).tolist()
    texts = frame["text"].fillna("").astype(str).tolist()
    metadata = frame["metadata"].fillna("").astype(str).tolist() if "metadata" in frame else [""] * len(frame)

    # Duplicates share a key; the first in sorted order stands for its group.
    keys = [normalise(text) or "\0" + normalise(title) for title, text in zip(titles, texts, strict=True)]
    group, _ = pd.factorize(pd.Series(keys, dtype=object), sort=False)
    members: dict[int, list[str]] = {}
    for position, code in enumerate(group.tolist()):
        members.setdefault(code, []).append(doc_ids[position])
    first_of_group = ~pd.Series(group).duplicated().to_numpy()

    document_frequency: Counter[str] = Counter()
    distinct_content = np.zeros(len(frame), dtype=np.int64)
    for position, (title, text) in enumerate(zip(titles, texts, strict=True)):
        terms = set(_terms(f"{title} {text}"))
        document_frequency.update(terms)
        # Set and map operations run in C: a per-term Python test tripled the time of this pass.
        distinct_content[position] = len(terms) - len(terms & STOPWORDS) - sum(map(str.isdigit, terms))
    too_short = distinct_content < min_terms
    eligible = np.flatnonzero(first_of_group & ~too_short)

    target = min(max(size, min_size), len(eligible))
    warnings = []
    if target < min_size:
        warnings.append(
            f"only {len(eligible)} distinct documents have {min_terms} content words or more: "
            f"{target} queries, fewer than the {min_size} wanted"
        )

    strata: dict[tuple[str, str], list[int]] = {}
    for position in eligible.tolist():
        strata.setdefault((tenants[position], _source_of(metadata[position])), []).append(position)
    ordered = sorted(strata)
    allocation = allocate([len(strata[key]) for key in ordered], target) if target else [0] * len(ordered)
    chosen = sorted(
        position
        for key, count in zip(ordered, allocation, strict=True)
        for position in rng.choice(strata[key], size=count, replace=False).tolist()
    )

    title_counts = Counter(normalise(titles[p]) for p in np.flatnonzero(first_of_group).tolist())
    with_title = [
        p for p in chosen if _informative_title(titles[p], doc_ids[p]) and title_counts[normalise(titles[p])] == 1
    ]
    n_titles = min(len(with_title), round(title_share * target))
    title_queries = set(rng.choice(with_title, size=n_titles, replace=False).tolist()) if n_titles else set()

    documents_total = len(frame)
    forms = word_forms(document_frequency) if variant_share > 0 else {}
    varied = 0
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    query_doc: dict[str, str] = {}
    query_source: dict[str, QuerySource] = {}
    tenant_of: dict[str, str] = {}
    for position in chosen:
        source: QuerySource = "title" if position in title_queries else "terms"
        if source == "title":
            query = " ".join(titles[position].split())
        else:
            sampled = _sampled_terms(
                f"{titles[position]} {texts[position]}", document_frequency, documents_total, rng, mean_extra_terms
            )
            sampled, changed = _vary_forms(sampled, forms, document_frequency, rng, variant_share)
            query, varied = " ".join(sampled), varied + changed
        digest = content_hash(tenants[position], doc_ids[position])
        # Two 8-digit prefixes meet about once in 10^5 sets of 300: the full hash then keeps both.
        qid = f"ki-{digest[:8]}" if f"ki-{digest[:8]}" not in queries else f"ki-{digest}"
        queries[qid] = query
        qrels[qid] = {doc_id: 1 for doc_id in members[int(group[position])]}
        query_doc[qid] = doc_ids[position]
        query_source[qid] = source
        tenant_of[qid] = tenants[position]

    return GeneratedGold(
        kind="known_item",
        method=(
            f"known-item simulation (Azzopardi et al. 2007): up to {title_share:.0%} informative titles, the rest "
            f"2+Poisson({mean_extra_terms}) terms sampled by tf-idf, {variant_share:.0%} of them in another form of "
            f"their stem; tenant/source-stratified sample, seed {seed}"
        ),
        seed=seed,
        created_at=created_at or now_iso(),
        queries=queries,
        qrels=qrels,
        query_doc=query_doc,
        query_source=query_source,
        tenant_of=tenant_of,
        stats={
            "documents": documents_total,
            "duplicates": int((~first_of_group).sum()),
            "too_short": int(too_short.sum()),
            "eligible": len(eligible),
            "strata": len(strata),
            "title_queries": n_titles,
            "term_queries": len(chosen) - n_titles,
            "varied_terms": varied,
        },
        warnings=warnings,
    )


def _sampled_terms(
    text: str, document_frequency: Counter[str], documents: int, rng: np.random.Generator, mean_extra_terms: float
) -> list[str]:
    term_frequency = Counter(t for t in _terms(text) if _is_content(t))
    vocabulary = list(term_frequency)  # first-occurrence order
    weights = np.array(
        [term_frequency[t] * (math.log((1 + documents) / (1 + document_frequency[t])) + 1) for t in vocabulary]
    )
    length = min(2 + int(rng.poisson(mean_extra_terms)), MAX_QUERY_TERMS, len(vocabulary))
    picked = rng.choice(len(vocabulary), size=length, replace=False, p=weights / weights.sum())
    return [vocabulary[i] for i in sorted(picked.tolist())]


def _vary_forms(
    terms: list[str],
    forms: Mapping[str, list[str]],
    document_frequency: Mapping[str, int],
    rng: np.random.Generator,
    share: float,
) -> tuple[list[str], int]:
    """``terms`` with each, at probability ``share``, another form of its stem from the
    collection (by document frequency); and how many were changed."""
    varied = list(terms)
    changed = 0
    for index, term in enumerate(terms):
        others = [form for form in forms.get(term, ()) if form not in varied]
        if not others or rng.random() >= share:
            continue
        weights = np.array([document_frequency[form] for form in others], dtype=np.float64)
        varied[index] = others[int(rng.choice(len(others), p=weights / weights.sum()))]
        changed += 1
    return varied, changed
