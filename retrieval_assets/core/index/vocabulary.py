"""Query-expansion vocabulary: terms from names, descriptions and keywords, with embeddings."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import groupby

import pandas as pd

from retrieval_assets.core.embed.cache import CacheStats, EmbeddingCache, content_hash, encode_with_cache
from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback
from retrieval_assets.core.models import Chunk
from retrieval_assets.core.settings import VocabularySettings
from retrieval_assets.core.embed.vectors import dense_values

VOCABULARY_COLUMNS = ["term", "doc_freq", "sources", "embedding"]

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


def _terms_by_source(chunk: Chunk) -> Iterable[tuple[str, str]]:
    for word in words(chunk.title):
        yield word, "name"
    for word in words(chunk.text):
        yield word, "description"
    keywords = chunk.metadata.get("keywords", [])
    for keyword in keywords if isinstance(keywords, list) else [keywords]:
        phrase = " ".join(str(keyword).lower().split())
        if phrase:
            yield phrase, "keyword"


def collect_terms(chunks: Iterable[Chunk], settings: VocabularySettings) -> pd.DataFrame:
    """Terms with their document frequency and where they came from, most frequent first.

    Documents are counted one at a time, so memory grows with the distinct terms, not with
    terms x documents (10 million set entries on the ACL Anthology)."""
    doc_freq: Counter[str] = Counter()
    sources: dict[str, set[str]] = defaultdict(set)
    for _, doc_chunks in groupby(sorted(chunks, key=lambda c: c.doc_id), key=lambda c: c.doc_id):
        doc_terms = set()
        for chunk in doc_chunks:
            for term, source in _terms_by_source(chunk):
                doc_terms.add(term)
                sources[term].add(source)
        doc_freq.update(doc_terms)
    kept = sorted(
        (t for t, df in doc_freq.items() if df >= settings.min_doc_freq), key=lambda t: (-doc_freq[t], t)
    )[: settings.max_terms]
    return pd.DataFrame(
        {
            "term": kept,
            "doc_freq": [doc_freq[t] for t in kept],
            "sources": [sorted(sources[t]) for t in kept],
        }
    )


def term_key(term: str) -> str:
    """A term's key in the terms cache (kept apart from chunk vectors, so that looking terms
    up never reads every chunk's vector)."""
    return content_hash("term", term)


def build_vocabulary(
    chunks: Sequence[Chunk],
    encoder: DenseEncoder,
    settings: VocabularySettings,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
) -> tuple[pd.DataFrame, CacheStats]:
    """Terms with their embeddings; a term embedded by an earlier build is not encoded again."""
    terms = collect_terms(chunks, settings)
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
