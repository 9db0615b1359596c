"""A small BEIR catalog with enough gold queries to cross-validate on, cut from the bundled SciFact sample."""

from __future__ import annotations

import json
from pathlib import Path

from retrieval_assets.paths import BUNDLED_DATA

SCIFACT_MINI = BUNDLED_DATA / "scifact_mini"


def write_gold_catalog(root: Path, queries: int = 40, distractors: int = 60) -> Path:
    """The first ``queries`` judged queries of the bundled sample, their documents and ``distractors`` others."""
    root.mkdir(parents=True, exist_ok=True)
    header, *lines = (SCIFACT_MINI / "qrels" / "test.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in lines]
    kept = list(dict.fromkeys(qid for qid, _, _ in rows))[:queries]
    rows = [row for row in rows if row[0] in kept]
    relevant = {doc for _, doc, _ in rows}
    corpus = [json.loads(line) for line in (SCIFACT_MINI / "corpus.jsonl").read_text().splitlines() if line.strip()]
    docs = [d for d in corpus if d["_id"] in relevant] + [d for d in corpus if d["_id"] not in relevant][:distractors]
    all_queries = [
        json.loads(line) for line in (SCIFACT_MINI / "queries.jsonl").read_text().splitlines() if line.strip()
    ]
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text("\n".join([header, *("\t".join(r) for r in rows)]) + "\n")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in all_queries if q["_id"] in kept))
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return root
