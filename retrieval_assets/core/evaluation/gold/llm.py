"""Questions written by a language model for the documents of known-item gold.

A model that reads a document and is asked for a question in its own words paraphrases, so its
questions share fewer words with the document than sampled terms do: the lexical-overlap bias
towards BM25 of known-item queries shrinks (it does not vanish: models copy rare terms and names).
Any OpenAI-compatible server works (``POST {base_url}/chat/completions``: vLLM, llama.cpp, Ollama,
OpenAI): one request per document, temperature 0, a bounded answer. The calls are bounded too: a
timeout per request, the document cut to ``MAX_DOCUMENT_CHARS``, and after ``max_consecutive_failures``
failures in a row the remaining documents are not asked (a server that is down costs a few
timeouts, not one per document). A document whose question failed keeps its known-item query.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import pandas as pd

from retrieval_assets.core.evaluation.gold.model import GeneratedGold, QuerySource

MAX_DOCUMENT_CHARS = 4000
MAX_QUESTION_CHARS = 300
SYSTEM_PROMPT = (
    "You write search queries for a retrieval test. Given a document, write the one question a user would ask "
    "whose answer is this document. Use your own words rather than phrases copied from the document. "
    "Reply with the question only, on one line."
)


def _ask(client: httpx.Client, url: str, model: str, title: str, text: str, headers: Mapping[str, str]) -> str:
    document = f"{title}\n\n{text}".strip()[:MAX_DOCUMENT_CHARS]
    response = client.post(
        url,
        headers=dict(headers),
        json={
            "model": model,
            "temperature": 0,
            "max_tokens": 64,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": document},
            ],
        },
    )
    response.raise_for_status()
    content = response.json()["choices"][0]["message"]["content"]
    lines = content.strip().splitlines() if isinstance(content, str) else []
    question = lines[0].strip().strip("\"'").strip() if lines else ""
    if not question or len(question) > MAX_QUESTION_CHARS:
        raise ValueError(f"unusable answer {content!r}")
    return question


def generate_llm_questions(
    documents_sample: pd.DataFrame,
    base_url: str,
    *,
    model: str,
    api_key: str | None = None,
    timeout: float = 30,
    client: httpx.Client | None = None,
    max_consecutive_failures: int = 5,
) -> tuple[dict[str, str], list[str]]:
    """One question per row of ``documents_sample`` (columns query_id, title, text), in row order.
    Returns the questions of the rows that succeeded, by query id, and one "query id: why" line
    per row that did not."""
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    own = client is None
    http = client if client is not None else httpx.Client(timeout=timeout)
    questions: dict[str, str] = {}
    failures: list[str] = []
    in_a_row = 0
    try:
        for qid, title, text in zip(
            documents_sample["query_id"].astype(str),
            documents_sample["title"].fillna("").astype(str),
            documents_sample["text"].fillna("").astype(str),
            strict=True,
        ):
            if in_a_row >= max_consecutive_failures:
                failures.append(f"{qid}: not asked after {in_a_row} failures in a row")
                continue
            try:
                questions[qid] = _ask(http, url, model, title, text, headers)
                in_a_row = 0
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                failures.append(f"{qid}: {type(exc).__name__}: {exc}")
                in_a_row += 1
    finally:
        if own:
            http.close()
    return questions, failures


def with_llm_questions(
    gold: GeneratedGold,
    documents: pd.DataFrame,
    base_url: str,
    *,
    model: str,
    api_key: str | None = None,
    timeout: float = 30,
    client: httpx.Client | None = None,
    max_consecutive_failures: int = 5,
) -> GeneratedGold:
    """``gold`` with each active query replaced by the model's question about its document; a
    query whose question failed stays as it was, and the failures are listed in ``warnings``.
    Call it before freezing: the queries, so the fingerprint, change."""
    by_id = documents.drop_duplicates("doc_id").set_index("doc_id")
    found = {qid: gold.query_doc[qid] in by_id.index for qid in gold.queries}
    qids = [qid for qid, present in found.items() if present]
    failures = [f"{qid}: document {gold.query_doc[qid]} not found" for qid, present in found.items() if not present]
    rows = by_id.loc[[gold.query_doc[qid] for qid in qids], ["title", "text"]].reset_index(drop=True)
    rows.insert(0, "query_id", qids)
    questions, asked = generate_llm_questions(
        rows,
        base_url,
        model=model,
        api_key=api_key,
        timeout=timeout,
        client=client,
        max_consecutive_failures=max_consecutive_failures,
    )
    failures += asked
    sources: dict[str, QuerySource] = {qid: "llm" if qid in questions else s for qid, s in gold.query_source.items()}
    answered = len(questions)
    return gold.model_copy(
        update={
            "kind": "llm" if answered else gold.kind,
            "method": f"{gold.method}; {answered} of {len(gold.queries)} queries replaced by {model}'s questions",
            "queries": {qid: questions.get(qid, query) for qid, query in gold.queries.items()},
            "query_source": sources,
            "stats": {**gold.stats, "llm_questions": answered, "llm_failures": len(failures)},
            "warnings": [*gold.warnings, *(f"LLM question failed, known-item query kept: {f}" for f in failures)],
        }
    )
