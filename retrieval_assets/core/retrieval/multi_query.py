"""Query reformulations for multi-query aggregation.

Deterministic ones need no service: pseudo-relevance feedback (the first pass's top documents
suggest terms, RM3-style) and vocabulary-neighbour expansion. When an OpenAI-compatible
endpoint is configured, an LLM writes paraphrases too; if it fails, the deterministic
reformulations still run and the error is reported in the diagnostics.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import httpx

from retrieval_assets.core.index.vocabulary import words

_LLM_PROMPT = (
    "Rewrite the search query below as {n} different search queries that a domain expert would type "
    "to find the same documents. Keep every constraint of the original (years, authors, names). "
    "Answer with one query per line and nothing else.\n\nQuery: {query}"
)


def feedback_terms(
    query: str,
    feedback_texts: Sequence[str],
    doc_freq: Mapping[str, int],
    num_documents: int,
    max_terms: int,
) -> list[str]:
    """Terms that characterise the feedback documents: length-normalised term frequency summed
    over the documents, times idf; terms of the query and terms seen in fewer than two
    documents of the collection (typos, ids) are skipped."""
    query_terms = set(words(query))
    weights: defaultdict[str, float] = defaultdict(float)
    for text in feedback_texts:
        counts = Counter(words(text))
        length = sum(counts.values()) or 1
        for term, count in counts.items():
            df = doc_freq.get(term, 0)
            if term in query_terms or df < 2:
                continue
            weights[term] += count / length * math.log(1 + num_documents / df)
    return [term for term, _ in sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:max_terms]]


class LLMReformulator:
    """Paraphrases from an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def reformulate(self, query: str, n: int) -> list[str]:
        """Up to ``n`` distinct reformulations, the original excluded. Raises ``RuntimeError``
        with the endpoint's answer (never the key) when the call fails."""
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "user", "content": _LLM_PROMPT.format(n=n, query=query)}],
        }
        try:
            response = self._client.post("/chat/completions", json=body)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise RuntimeError(f"LLM reformulation via {self.base_url} failed: {type(exc).__name__}: {exc}") from None
        lines = (line.strip().lstrip("-*0123456789.) ").strip() for line in str(content).splitlines())
        seen = {query.strip().lower()}
        reformulations = []
        for line in lines:
            if line and line.lower() not in seen:
                seen.add(line.lower())
                reformulations.append(line)
        return reformulations[:n]

    def close(self) -> None:
        self._client.close()
