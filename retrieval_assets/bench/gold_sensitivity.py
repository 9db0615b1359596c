"""``retrieval-assets bench-gold-sensitivity``: does generated gold refuse what real gold refuses?

Issue 30's sensitivity check. A BEIR directory is built twice over, in two homes, through the
product's own build and evaluation jobs: once judged by its real gold (``gold_path``), once by
known-item gold the ``gold_queries`` asset generates from the corpus (the catalog then has no gold
of its own). In each home the intact corpus is built and promoted, then each deliberately broken
candidate is built from it and evaluated by the gate against that promoted version:

* ``truncated``: every document's text cut to its first 20 words;
* ``half_dropped``: a seeded half of the documents left out;
* ``weaker_dense_model``: the dense model swapped for all-MiniLM-L6-v2;
* ``no_stemming``: the lexical index built without stemming (``lexical_stemmer: none``).

A candidate the gate passes is rolled back before the next break, so every break is judged against
the intact version. The catalog is one JSON Lines table rewritten per break, so the generated gold,
which belongs to the catalog's path, is drawn once and judges every break; the generated home starts
from a copy of the real home's embedding cache (vectors are keyed by content), so the intact corpus
is encoded once.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from retrieval_assets.bench.builds import BenchmarkError, sealed
from retrieval_assets.bench.report import emit_figures, scratch_dir
from retrieval_assets.core.index.servers import roll_back
from retrieval_assets.core.ingest.catalog import catalog_file
from retrieval_assets.core.io.files import write_atomically
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource, ModelResource
from retrieval_assets.runs import build_index, deployment_resources, evaluate_version

WEAKER_DENSE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TRUNCATED_WORDS = 20
DROP_SEED = 7

Rows = list[dict[str, Any]]


def _read_rows(path: Path) -> tuple[Rows, list[str]]:
    """The corpus's records, and the lines that are not JSON objects (kept as they are in every
    copy, for the build to quarantine as it would the original's)."""
    rows: Rows = []
    malformed: list[str] = []
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as lines:
        for line in filter(str.strip, lines):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                rows.append(record)
            else:
                malformed.append(line.rstrip("\n"))
    return rows, malformed


def _write_rows(path: Path, rows: Rows, malformed: list[str]) -> None:
    lines = [*(json.dumps(row) for row in rows), *malformed]
    write_atomically(path, lambda target: target.write_text("".join(line + "\n" for line in lines)))


def _truncated(rows: Rows) -> Rows:
    return [{**row, "text": " ".join(str(row.get("text") or "").split()[:TRUNCATED_WORDS])} for row in rows]


def _half_dropped(rows: Rows) -> Rows:
    kept = sorted(random.Random(DROP_SEED).sample(range(len(rows)), len(rows) - len(rows) // 2))
    return [rows[i] for i in kept]


# Break name -> (how the corpus changes, the build settings it is built and queried with).
BREAKS: dict[str, tuple[Callable[[Rows], Rows] | None, dict[str, Any]]] = {
    "truncated": (_truncated, {}),
    "half_dropped": (_half_dropped, {}),
    "weaker_dense_model": (None, {"models": {"dense_model": WEAKER_DENSE_MODEL}}),
    "no_stemming": (None, {"build": {"lexical_stemmer": "none"}}),
}
GOLD_KINDS = ("real", "generated")


def bench_gold_sensitivity(
    dataset: Path, requested_workdir: str | None, breaks: list[str] | None, json_out: str | None
) -> int:
    """Both gold kinds' verdicts on every break (or ``breaks``); the last stdout line is the JSON figures."""
    unknown = sorted(set(breaks or ()) - set(BREAKS))
    if unknown:
        print(f"bench-gold-sensitivity: unknown breaks {unknown}; known: {', '.join(BREAKS)}", file=sys.stderr)
        return 2
    catalog_file(dataset, "beir")  # a missing corpus is reported before anything is built
    with scratch_dir(requested_workdir, "retrieval-gold-sensitivity-") as workdir:
        figures = run_sensitivity(dataset, workdir, breaks)
    print(verdict_table(figures))
    emit_figures(figures, json_out)
    return 0


def _judged(
    home: Path,
    catalog: CatalogResource,
    instance: DagsterInstance,
    rows: tuple[Rows, list[str]],
    settings: dict[str, Any],
    label: str,
) -> dict[str, Any]:
    """Build ``rows`` (records, malformed lines) as the catalog's table with these settings and
    evaluate the candidate (the gate promotes it when it passes); its version, documents and
    evaluation report."""
    _write_rows(Path(catalog.path), *rows)
    resources = deployment_resources(
        home,
        catalog,
        ModelResource(**settings.get("models", {})),
        build=IndexBuildResource(**settings.get("build", {})),
    )
    build = sealed(build_index(resources, instance))
    evaluation = evaluate_version(resources, build.candidate.version, instance, configurations=[])
    report = resources["storage"].versions().version(build.candidate.version).evaluation()
    if report is None:
        raise BenchmarkError(f"{label}: the evaluation run {evaluation.run_id} wrote no report; see its log above")
    return {
        "version": build.candidate.version,
        "documents": build.documents,
        "encoded": build.encoded["dense"],
        "report": report,
    }


def _verdict(outcome: dict[str, Any]) -> dict[str, Any]:
    gate = outcome["report"]["gate"]
    return {
        "refused": not gate["passed"],
        "reasons": gate["reasons"],
        "documents": outcome["documents"],
        **{
            f"{side}_{metric.replace('@', '_at_')}": gate["comparison"].get(metric, {}).get(side)
            for metric in ("ndcg@10", "recall@100")
            for side in ("candidate", "promoted")
        },
    }


def run_sensitivity(dataset: Path, workdir: Path, breaks: list[str] | None = None) -> dict[str, Any]:
    names = breaks or list(BREAKS)
    intact, malformed = _read_rows(catalog_file(dataset, "beir"))
    table = workdir / "catalog" / "corpus.jsonl"
    table.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    verdicts: dict[str, dict[str, Any]] = {name: {} for name in names}
    gold: dict[str, Any] = {}
    for kind in GOLD_KINDS:
        home = workdir / kind
        if kind == "generated" and not (home / "embedding_cache").exists():
            shutil.copytree(workdir / "real" / "embedding_cache", home / "embedding_cache")
        catalog = CatalogResource(format="table", path=str(table), gold_path=str(dataset) if kind == "real" else None)
        instance = DagsterInstance.ephemeral()
        baseline = _judged(home, catalog, instance, (intact, malformed), {}, f"{kind} gold, intact corpus")
        report = baseline["report"]
        if not report["gate"]["passed"]:
            raise BenchmarkError(f"the intact corpus was refused with {kind} gold: {report['gate']['reasons']}")
        gold[kind] = {
            "kind": report["gold_kind"],
            "fingerprint": report["gold"],
            "queries": len(report["per_query"]),
            "intact_ndcg_at_10": report["runs"][report["served"]]["ndcg@10"],
            "intact_encoded": baseline["encoded"],
        }
        versions = deployment_resources(home, catalog)["storage"].versions()
        for name in names:
            change, settings = BREAKS[name]
            rows = (change(intact) if change else intact, malformed)
            verdicts[name][kind] = _verdict(_judged(home, catalog, instance, rows, settings, f"{kind}: {name}"))
            if not verdicts[name][kind]["refused"]:  # the next break is judged against the intact version again
                roll_back(versions, None, to=baseline["version"], by="bench-gold-sensitivity", why=f"after {name}")
    for kinds in verdicts.values():
        kinds["agree"] = kinds["generated"]["refused"] or not kinds["real"]["refused"]
    return {
        "dataset": dataset.name,
        "gold": gold,
        "breaks": verdicts,
        "generated_refuses_what_real_refuses": all(kinds["agree"] for kinds in verdicts.values()),
        "seconds": round(time.perf_counter() - started, 1),
    }


def verdict_table(figures: dict[str, Any]) -> str:
    """One line per break: each gold's verdict and nDCG@10 promoted → candidate."""
    lines = [f"{'break':<20} {'real gold':<32} {'generated gold':<32}"]
    for name, kinds in figures["breaks"].items():
        cells = []
        for kind in GOLD_KINDS:
            verdict = kinds[kind]
            before, after = verdict["promoted_ndcg_at_10"], verdict["candidate_ndcg_at_10"]
            moved = f"{before:.4f} → {after:.4f}" if before is not None and after is not None else "n/a"
            cells.append(f"{'REFUSED' if verdict['refused'] else 'passed':<8} nDCG@10 {moved:<15}")
        lines.append(f"{name:<20} {cells[0]:<32} {cells[1]:<32}")
    agree = figures["generated_refuses_what_real_refuses"]
    lines.append(f"generated gold refuses every break real gold refuses: {'yes' if agree else 'no'}")
    return "\n".join(lines)
