"""``retrieval-assets bench-incremental``: how much of a full build each kind of re-run costs.

The asset graph runs in process (``runs.py``) exactly as a nightly run does: a full build, a
no-change re-run, partly-changed re-runs rebuilt in full and as deltas, and one changed
document, each timed, with the embedding cache's segments reported after each.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from retrieval_assets.bench.builds import BenchmarkError, SealedBuild, sealed
from retrieval_assets.bench.report import emit_figures, peak_rss_mb, scratch_dir
from retrieval_assets.core.embed.cache import SEGMENT_GLOB, content_hash
from retrieval_assets.core.ingest.catalog import CatalogFormat, catalog_file
from retrieval_assets.core.io.files import write_json
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource
from retrieval_assets.runs import build_index, deployment_resources

# What a full build took and which version it sealed, so ``--resume`` can time re-runs against it.
FULL_BUILD_RECORD = "full_build.json"


def bench_incremental(
    dataset: Path,
    catalog_format: CatalogFormat,
    requested_workdir: str | None,
    changed_fraction: float,
    changed_runs: int,
    resume: bool,
    json_out: str | None,
) -> int:
    """Full build, no-change re-run, changed re-runs; the last stdout line is the JSON figures."""
    catalog_file(dataset, catalog_format)  # a missing corpus is reported before the models load
    if resume and not requested_workdir:
        print("bench-incremental: --resume needs the --workdir of the run that made the full build", file=sys.stderr)
        return 2
    with scratch_dir(requested_workdir, "retrieval-incremental-") as workdir:
        figures = run_incremental_benchmark(
            dataset, catalog_format, workdir, changed_fraction, changed_runs=changed_runs, resume=resume
        )
    emit_figures(figures, json_out)
    return 0


def cache_segments(home: Path) -> dict[str, int]:
    """Segments per embedding cache (dense, sparse, terms) under ``home``."""
    root = home / "embedding_cache"
    return {kind.name: len(list(kind.glob(f"*/{SEGMENT_GLOB}"))) for kind in sorted(root.iterdir()) if kind.is_dir()}


def run_incremental_benchmark(
    dataset: Path,
    catalog_format: CatalogFormat,
    workdir: Path,
    changed_fraction: float = 0.01,
    changed_runs: int = 1,
    resume: bool = False,
) -> dict[str, Any]:
    """Each build timed from reading the catalog to a sealed version, and promoted (untimed) so
    the next one can be a delta from it: a full build, a re-run with no change, a re-run with
    ``changed_fraction`` of the documents changed and every index rebuilt from cached vectors
    (deltas off), the same share changed again as a delta build, one document changed, then
    ``changed_runs - 1`` more changed re-runs.

    The full build's figures and version are recorded in ``workdir``. With ``resume`` they are
    read back instead of building again (a cold build of a large catalog takes hours): that
    version is promoted and the re-runs are timed against it, changing documents not changed
    by any earlier run, so they are re-embedded rather than found in the cache."""
    corpus = catalog_file(dataset, catalog_format)
    catalog_dir = workdir / "catalog"
    catalog_dir.mkdir(parents=True, exist_ok=True)
    # The working copy keeps the layout the format expects: a BEIR directory or a JSONL file.
    working = catalog_dir / ("corpus.jsonl" if catalog_format == "beir" else "catalog.jsonl")
    change_documents(corpus, working, TEXT_FIELD[catalog_format], fraction=0.0)
    catalog = CatalogResource(format=catalog_format, path=str(catalog_dir if catalog_format == "beir" else working))
    home = workdir / "home"
    resources = deployment_resources(home, catalog)
    # The ignore below: dagster's dataclass_transform (BaseResourceMeta) types the resource's
    # __init__ from its own fields only, not those inherited from IndexBuildSettings (a pydantic model).
    rebuild_in_full = deployment_resources(
        home,
        catalog,
        resources["models"],
        build=IndexBuildResource(delta_max_changed_fraction=0.0),  # type: ignore[call-arg]
    )
    versions = resources["storage"].versions()
    instance = DagsterInstance.ephemeral()
    # Models are loaded once beforehand, as a long-lived process holds them.
    resources["models"].dense_encoder(), resources["models"].sparse_encoder()

    def timed_build(with_resources: dict[str, Any] = resources) -> tuple[float, SealedBuild]:
        started = time.perf_counter()
        outcome = sealed(build_index(with_resources, instance))
        seconds = time.perf_counter() - started
        # Not timed: what the evaluation gate does for a passing version (the bench measures builds).
        versions.promote(versions.version(outcome.candidate.version), reason="bench-incremental")
        return seconds, outcome

    def changed_build(round_: int, limit: int | None = None, **build: Any) -> dict[str, Any]:
        changed = change_documents(working, working, TEXT_FIELD[catalog_format], changed_fraction, round_, limit)
        seconds, outcome = timed_build(**build)
        return {
            "changed_documents": changed,
            "seconds": round(seconds, 2),
            "ratio": round(seconds / full_seconds, 4),
            "mode": outcome.candidate.mode,
            "reembedded_chunks": outcome.encoded["dense"],
            "stages": outcome.step_seconds,
            "cache_segments": cache_segments(home),
        }

    record_path = workdir / FULL_BUILD_RECORD
    if resume:
        if not record_path.is_file():
            raise BenchmarkError(f"nothing to resume: {record_path} is written by a run without --resume")
        full = json.loads(record_path.read_text())
        versions.promote(versions.version(full["version"]), reason="bench-incremental resumed")
    else:
        seconds, outcome = timed_build()
        full = {
            "version": outcome.candidate.version,
            "seconds": seconds,
            "documents": outcome.documents,
            "chunks": outcome.chunks,
            "stages": outcome.step_seconds,
            "peak_rss_mb": peak_rss_mb(),
            "next_round": 1,
        }
    full_seconds = full["seconds"]
    first = full["next_round"]
    rounds = range(first, first + changed_runs + 2)
    full["next_round"] = rounds.stop
    write_json(full, record_path)
    noop_seconds, noop = timed_build()
    rebuilt = changed_build(rounds[0], with_resources=rebuild_in_full)
    delta = changed_build(rounds[1])
    one_document = changed_build(rounds[2], limit=1)
    more = [changed_build(round_) for round_ in rounds[3:]]
    return {
        "dataset": dataset.name,
        "resumed": resume,
        "full_version": full["version"],
        "documents": full["documents"],
        "chunks": full["chunks"],
        "changed_documents": rebuilt["changed_documents"],
        "full_stages": full["stages"],
        "one_percent_stages": rebuilt["stages"],
        "delta_one_percent_stages": delta["stages"],
        "one_document_stages": one_document["stages"],
        "noop_reused_version": noop.candidate.reused,
        "noop_ratio": round(noop_seconds / full_seconds, 4),
        "one_percent_ratio": rebuilt["ratio"],
        "delta_one_percent_ratio": delta["ratio"],
        "one_document_ratio": one_document["ratio"],
        "full_seconds": round(full_seconds, 2),
        "noop_seconds": round(noop_seconds, 2),
        "one_percent_seconds": rebuilt["seconds"],
        "delta_one_percent_seconds": delta["seconds"],
        "delta_one_percent_mode": delta["mode"],
        "one_document_seconds": one_document["seconds"],
        "one_document_mode": one_document["mode"],
        "peak_rss_mb": round(full["peak_rss_mb"], 1),
        "reembedded_chunks_noop": noop.encoded["dense"],
        "reembedded_chunks_one_percent": rebuilt["reembedded_chunks"],
        "changed_runs": [rebuilt, delta, one_document, *more],
        "cache_segments": cache_segments(home),
    }


# Fields of a catalog record that hold its main text, by catalog format.
TEXT_FIELD = {"beir": "text", "tool_catalog": "description"}


def change_documents(
    corpus: Path, target: Path, text_field: str, fraction: float, round_: int = 0, limit: int | None = None
) -> int:
    """Copy ``corpus`` (JSONL, optionally gzipped) to ``target`` with the text of ``fraction`` of
    its records (at most ``limit``) changed; the records are picked by a hash of their line and
    ``round_``, so the pick is stable, spread over the file, and differs from round to round.
    ``target`` may be ``corpus``. Returns how many records changed."""
    threshold = int(fraction * 2**32)
    changed = 0
    written = target.with_name(target.name + ".tmp")
    with _open_text(corpus) as lines, written.open("w", encoding="utf-8") as out:
        for line in lines:
            if (limit is None or changed < limit) and int(content_hash(str(round_), line)[:8], 16) < threshold:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = None
                if isinstance(record, dict):
                    revision = f"Revised for the incremental benchmark (round {round_})."
                    record[text_field] = f"{record.get(text_field) or ''} {revision}"
                    line = json.dumps(record) + "\n"
                    changed += 1
            out.write(line)
    written.replace(target)
    return changed


def _open_text(path: Path) -> Any:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")
