"""Derive the bundled sample datasets in ``data/`` from a shared datasets folder.

Usage::

    python data/make_bundles.py /path/to/shared/datasets [--out data]

The bundles are deterministic functions of the source files (no randomness), so running
this again on the same sources reproduces them byte for byte. See ``data/README.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

SCIFACT_QUERIES = 60  # first judged test queries, in qrels order
SCIFACT_DOCUMENTS = 600  # judged documents plus evenly spaced distractors
BIOTOOLS_STRIDE = 65  # keep every 65th bio.tools record: 19,649 -> 303 tools
ACL_STRIDE = 200  # keep every 200th ACL paper that has an abstract: 58,959 -> 295 papers
ACL_QUERY_STRIDE = 500


def make_scifact_mini(scifact: Path, out: Path) -> dict[str, int]:
    """The first judged test queries, their judged documents and evenly spaced distractors."""
    qrels_lines = (scifact / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = qrels_lines[0], [line for line in qrels_lines[1:] if line.strip()]
    query_ids = list(dict.fromkeys(row.split("\t")[0] for row in rows))[:SCIFACT_QUERIES]
    kept_rows = [row for row in rows if row.split("\t")[0] in query_ids]
    judged = list(dict.fromkeys(row.split("\t")[1] for row in kept_rows))

    corpus_lines = (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    corpus_ids = [str(json.loads(line)["_id"]) for line in corpus_lines]
    judged_set = set(judged)
    missing = judged_set - set(corpus_ids)
    if missing:
        raise SystemExit(f"judged documents missing from the SciFact corpus: {sorted(missing)}")
    remaining = [doc_id for doc_id in corpus_ids if doc_id not in judged_set]
    needed = SCIFACT_DOCUMENTS - len(judged)
    stride = len(remaining) // needed
    selected = judged_set | set(remaining[::stride][:needed])

    queries = [
        line
        for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip() and str(json.loads(line)["_id"]) in query_ids
    ]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    # Source lines are copied verbatim, in source order.
    kept_lines = [line for line, doc_id in zip(corpus_lines, corpus_ids, strict=True) if doc_id in selected]
    _write_lines(out / "corpus.jsonl", kept_lines)
    _write_lines(out / "queries.jsonl", queries)
    _write_lines(out / "qrels" / "test.tsv", [header, *kept_rows])
    return {
        "documents": len(selected),
        "judged_documents": len(judged),
        "distractor_stride": stride,
        "queries": len(queries),
        "qrels": len(kept_rows),
    }


def biotools_to_catalog(record: dict[str, Any]) -> dict[str, Any]:
    """One bio.tools record in the project's tool-catalog schema."""
    metadata = {
        "topics": record["topics"],
        "operations": record["operations"],
        "tool_types": record["toolType"],
        "languages": record["language"],
        "license": record["license"],
        "homepage": record["homepage"],
        "dois": record["dois"],
    }
    return {
        "id": record["_id"],
        "name": record["title"],
        "description": record["text"],
        "keywords": list(dict.fromkeys(record["topics"] + record["operations"])),
        # Empty strings and lists carry nothing to filter on.
        "metadata": {key: value for key, value in metadata.items() if value not in ("", [], None)},
    }


def make_biotools_sample(corpus: Path, out: Path) -> dict[str, int]:
    """Every ``BIOTOOLS_STRIDE``-th record, empty descriptions included (cleaning quarantines them)."""
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for index, line in enumerate(handle) if index % BIOTOOLS_STRIDE == 0]
    out.mkdir(parents=True, exist_ok=True)
    tools = [biotools_to_catalog(record) for record in records]
    _write_lines(out / "catalog.jsonl", [json.dumps(tool, ensure_ascii=False) for tool in tools])
    return {"tools": len(tools), "empty_descriptions": sum(not tool["description"].strip() for tool in tools)}


def make_acl_sample(corpus: Path, out: Path) -> dict[str, int]:
    """Every ``ACL_STRIDE``-th paper with an abstract, lines copied verbatim (BEIR corpus layout
    with the Anthology's ``authors``, ``year``, ``venue`` and ``booktitle`` beside ``title``/``text``)."""
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        with_abstract = [line.rstrip("\n") for line in handle if json.loads(line).get("text")]
    papers = with_abstract[::ACL_STRIDE]
    out.mkdir(parents=True, exist_ok=True)
    _write_lines(out / "corpus.jsonl", papers)
    # Query texts for timing searches over the whole Anthology (bench-latency): paper titles.
    titles = [" ".join(json.loads(line)["title"].split()) for line in with_abstract[7::ACL_QUERY_STRIDE]]
    _write_lines(out / "latency_queries.txt", [title for title in titles if title])
    years = [int(json.loads(line)["year"]) for line in papers]
    return {"papers": len(papers), "latency_queries": len(titles), "first_year": min(years), "last_year": max(years)}


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path, help="shared datasets folder (holding scifact/ and biotools/)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent, help="output folder (default: data/)"
    )
    args = parser.parse_args()
    print("scifact_mini:", make_scifact_mini(args.datasets / "scifact", args.out / "scifact_mini"))
    biotools = args.datasets / "biotools" / "corpus.jsonl.gz"
    print("biotools_sample:", make_biotools_sample(biotools, args.out / "biotools_sample"))
    acl = args.datasets / "acl_anthology" / "corpus.jsonl.gz"
    print("acl_sample:", make_acl_sample(acl, args.out / "acl_sample"))


if __name__ == "__main__":
    main()
