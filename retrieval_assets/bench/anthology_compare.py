"""The ACL Anthology read from its ``data/`` directory (``sources.anthology``) against its JSON Lines
export (BEIR-style ``_id``, ``title``, ``text``, ``authors``, ``year``, ``venue``, ``booktitle``).

Reports the papers each side has, the ids only one side has (and, for those, the other side's
paper with the same title and year: the same paper under another id), and for papers both sides
have as documents how many titles and abstracts differ after whitespace normalisation, why, and how
many still differ once both sides go through cleaning's ``clean_text`` (which renders LaTeX).

    python -m retrieval_assets.bench.anthology_compare --data /tmp/anthology-data --jsonl corpus.jsonl.gz --out f.json
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval_assets.bench.report import emit_figures, peak_rss_mb
from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.cleaning import clean_text
from retrieval_assets.core.ingest.sources.anthology import read_anthology

EXAMPLES = 5
_TEX = re.compile(r"\\[A-Za-z]+|\^|_\{|\$")


def _normal(text: str | None) -> str:
    return " ".join((text or "").split())


def _why(export: str, ours: str) -> str:
    """Why two normalised texts differ, roughly."""
    if export.replace(" ", "") == ours.replace(" ", ""):
        return "spacing"  # the same characters, spaced differently: line breaks, "90 %"
    if _TEX.search(export):
        return "tex"  # the export keeps TeX source where the reader renders Unicode
    return "other"


def _context(export: str, ours: str) -> dict[str, str]:
    """The first differing stretch of each side, with a little context."""
    matcher = difflib.SequenceMatcher(None, export, ours, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return {"export": export[max(0, i1 - 30) : i2 + 30], "reader": ours[max(0, j1 - 30) : j2 + 30]}
    return {}


def _field_diffs(pairs: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Counts, causes and examples of differing (id, export, reader) texts."""
    differing = [(doc_id, a, b) for doc_id, a, b in pairs if _normal(a) != _normal(b)]
    causes = Counter(_why(_normal(a), _normal(b)) for _, a, b in differing)
    after_cleaning = [(doc_id, a, b) for doc_id, a, b in differing if clean_text(a) != clean_text(b)]
    examples: dict[str, list[dict[str, Any]]] = {}
    for doc_id, a, b in differing:
        cause = _why(_normal(a), _normal(b))
        if len(examples.setdefault(cause, [])) < EXAMPLES:
            examples[cause].append({"id": doc_id, **_context(_normal(a), _normal(b))})
    return {
        "compared": len(pairs),
        "differ": len(differing),
        "by_cause": dict(causes),
        "differ_after_clean_text": len(after_cleaning),
        "examples": examples,
        "examples_after_clean_text": [
            {"id": doc_id, **_context(clean_text(a), clean_text(b))} for doc_id, a, b in after_cleaning[:EXAMPLES]
        ],
    }


def _reader_only(data: Path, ids: list[str], export: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The reader's papers missing from the export: title, PDF name (the XML's ``<url>``, which
    usually equals the id) and the export's paper with the same title and year, if any."""
    from acl_anthology import Anthology

    anthology = Anthology(datadir=data / "data" if (data / "data" / "xml").is_dir() else data, verbose=False)
    by_title = {(_normal(r.get("title")).lower(), str(r.get("year"))): doc_id for doc_id, r in export.items()}
    found = []
    for doc_id in ids:
        paper = anthology.get_paper(doc_id)
        if paper is None:
            continue
        title = paper.title.as_text()
        found.append(
            {
                "id": doc_id,
                "title": title,
                "frontmatter": paper.is_frontmatter,
                "pdf_name": paper.pdf.name if paper.pdf else None,
                "export_id_same_title": by_title.get((_normal(title).lower(), paper.year)),
            }
        )
    return found


def compare(data: Path, jsonl: Path) -> dict[str, Any]:
    started = time.perf_counter()
    read = read_anthology(CatalogSource(format="acl_anthology", path=str(data)))
    ours: dict[str, dict[str, Any]] = {}
    reasons: Counter[str] = Counter()
    for row in read.rows:
        record = json.loads(row.raw)
        if "rejected" in record:
            reasons[record["rejected"]["reason"]] += 1
        ours[record["id"]] = record
    reader_seconds = time.perf_counter() - started

    with gzip.open(jsonl, "rt", encoding="utf-8") if jsonl.suffix == ".gz" else jsonl.open() as handle:
        export = {record["_id"]: record for record in map(json.loads, handle)}

    documents = {doc_id for doc_id, r in ours.items() if "rejected" not in r}
    with_abstract = {doc_id for doc_id, r in export.items() if _normal(r.get("text"))}
    only_reader = sorted(set(ours) - set(export))
    only_export = sorted(set(export) - set(ours))
    common = sorted(documents & set(export))

    def meta_mismatches(field: str, export_value: Any) -> list[str]:
        return [i for i in common if export_value(export[i]) != ours[i]["metadata"].get(field)]

    mismatched = {
        "authors": meta_mismatches("authors", lambda r: r.get("authors")),
        "year": meta_mismatches("year", lambda r: int(r["year"]) if str(r.get("year")).isdigit() else r.get("year")),
        "venue": meta_mismatches("venue", lambda r: r.get("venue")),
        "booktitle": meta_mismatches("booktitle", lambda r: _normal(r.get("booktitle"))),
    }
    return {
        "reader": {
            **{k: v for k, v in read.stats.items()},
            "quarantined_by_reason": dict(reasons),
            "seconds": round(reader_seconds, 1),
            "peak_rss_mb": round(peak_rss_mb()),
        },
        "export": {"papers": len(export), "with_abstract": len(with_abstract)},
        "ids": {
            "common": len(set(ours) & set(export)),
            "only_reader": {"count": len(only_reader), "papers": _reader_only(data, only_reader[:20], export)},
            "only_export": {"count": len(only_export), "examples": only_export[:20]},
        },
        "abstracts": {
            "documents_without_export_abstract": sorted(documents - with_abstract)[: EXAMPLES * 2],
            "export_abstract_not_a_document": sorted((with_abstract & set(ours)) - documents)[: EXAMPLES * 2],
            "documents_without_export_abstract_count": len(documents - with_abstract),
            "export_abstract_not_a_document_count": len((with_abstract & set(ours)) - documents),
        },
        "titles": _field_diffs([(i, export[i].get("title") or "", ours[i]["title"]) for i in common]),
        "texts": _field_diffs([(i, export[i].get("text") or "", ours[i]["text"]) for i in common]),
        "metadata_mismatches": {
            field: {"count": len(ids), "examples": ids[:EXAMPLES]} for field, ids in mismatched.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the Anthology's data/ directory, or the folder holding it")
    parser.add_argument("--jsonl", required=True, help="the JSON Lines export (.jsonl or .jsonl.gz)")
    parser.add_argument("--out", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    emit_figures(compare(Path(args.data), Path(args.jsonl)), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
