"""``retrieval-assets bench``: build a BEIR directory with the product's own jobs and evaluate every configuration.

The asset graph runs in process (``runs.py``) exactly as a nightly run does, on a scratch home,
so the figures describe what users run; every configuration is evaluated through the evaluation
asset.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from retrieval_assets.bench.builds import BenchmarkError, sealed
from retrieval_assets.bench.generated_gold import agreement_table, measure_generated_gold
from retrieval_assets.bench.latency import query_encoding_p95_ms
from retrieval_assets.bench.micro_batching import batched_ranking_agreement
from retrieval_assets.bench.report import emit_figures, scratch_dir
from retrieval_assets.core.evaluation.benchmark import CONFIGURATIONS
from retrieval_assets.core.ingest.catalog import load_gold
from retrieval_assets.defs.io_manager import stored_value
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets.runs import build_index, deployment_resources, evaluate_version


def bench_beir(
    dataset: Path, requested_workdir: str | None, rerank: bool, json_out: str | None, generated_gold: bool = False
) -> int:
    """Build ``dataset`` in a scratch home (or ``requested_workdir``, kept) and evaluate it (with
    generated gold beside the real gold when ``generated_gold``); the last stdout line is the JSON
    figures."""
    if not (dataset / "corpus.jsonl").exists():
        print(f"{dataset} is not a BEIR directory (no corpus.jsonl)", file=sys.stderr)
        return 2
    with scratch_dir(requested_workdir, "retrieval-bench-") as scratch:
        figures = run_benchmark(dataset, scratch, rerank=rerank, generated_gold=generated_gold)
    if generated_gold:
        print(agreement_table(figures["generated_gold"]))
    emit_figures(figures, json_out)
    return 0


def run_benchmark(
    dataset: Path,
    workdir: Path,
    rerank: bool = True,
    generated_gold: bool = False,
    configurations: list[str] | None = None,
) -> dict[str, Any]:
    """Build ``dataset`` (BEIR) under ``workdir`` and evaluate every configuration (or only
    ``configurations`` besides the default one); with ``generated_gold``, each of them on
    known-item gold generated from the built documents too (``generated_gold.py``)."""
    gold = load_gold(dataset)
    resources = deployment_resources(workdir, CatalogResource(format="beir", path=str(dataset)))
    instance = DagsterInstance.ephemeral()
    started = time.perf_counter()
    build = sealed(build_index(resources, instance))
    build_seconds = time.perf_counter() - started
    # The build's garbage would otherwise be traversed by collections during the timed queries.
    gc.collect()
    gc.freeze()
    encode_p95 = query_encoding_p95_ms(resources["models"].dense_encoder(), gold.queries)
    configurations = [
        name
        for name, options in CONFIGURATIONS.items()
        if (rerank or not options.get("rerank")) and (configurations is None or name in configurations)
    ]
    evaluation = evaluate_version(resources, build.candidate.version, instance, configurations)
    report = resources["storage"].versions().version(build.candidate.version).evaluation()
    if report is None:
        raise BenchmarkError(f"the evaluation run {evaluation.run_id} wrote no report; see its log above")
    figures: dict[str, Any] = {
        "dataset": dataset.name,
        "docs": build.documents,
        "queries": len(gold.queries),
        "build_seconds": round(build_seconds, 2),
        "encode_query_p95_ms": round(encode_p95, 2),
        # ``tuned_cv``: each query scored with the configuration learned on the other folds.
        "runs": report["runs"],
        "default": report["default"],
        # Query vectors and the default configuration's top-10 lists, one query at a time against
        # concurrent callers sharing query-encoder calls: identical when the encoders batch exactly.
        "micro_batching": batched_ranking_agreement(
            resources["search"].retriever(build.candidate.version),
            resources["models"].dense_encoder(),
            list(gold.queries.values()),
        ),
    }
    if generated_gold:
        started = time.perf_counter()
        figures["generated_gold"] = measure_generated_gold(
            stored_value(resources["storage"].artifacts_dir, "cleaned_documents"),
            resources["search"],
            build.candidate.version,
            report["runs"],
            learned=resources["storage"].versions().version(build.candidate.version).learned_configuration(),
            real_per_query=report.get("ndcg_per_query"),
        )
        figures["generated_gold"]["seconds"] = round(time.perf_counter() - started, 2)
    return figures
