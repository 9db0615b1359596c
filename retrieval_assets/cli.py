"""``retrieval-assets``: run the main job, search the current index, benchmark a BEIR dataset."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from retrieval_assets.core.models import RetrievalResult


def _tqdm_progress(label: str):
    from tqdm import tqdm

    bar: dict[str, tqdm] = {}

    def report(done: int, total: int) -> None:
        if label not in bar:
            bar[label] = tqdm(total=total, desc=label, unit="item", file=sys.stderr, leave=False)
        bar[label].update(done - bar[label].n)
        if done >= total:
            bar[label].close()

    return report


def _print_result(result: RetrievalResult) -> None:
    print(f"query: {result.query!r}  strategies: {', '.join(result.strategies)}  fusion: {result.fusion}  "
          f"({result.timings_ms.get('total_ms', 0):.0f} ms)")
    for rank, hit in enumerate(result.hits, start=1):
        per_strategy = "  ".join(f"{name}#{s.rank}={s.score:.3f}" for name, s in hit.strategy_scores.items())
        title = hit.title or hit.text[:80]
        print(f"{rank:>3}. {hit.score:.4f}  {hit.doc_id}  [{hit.chunk_id}, {hit.section}]  {title[:90]}")
        print(f"     {per_strategy}")


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize every asset on the configured catalog, then print the evaluation and a sample query."""
    from dagster import DagsterInstance

    from retrieval_assets.definitions import defs

    # With $DAGSTER_HOME set the run is recorded where `dagster dev` shows it.
    instance = DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()
    result = defs.resolve_job_def("index_build_job").execute_in_process(instance=instance, raise_on_error=False)
    if not result.success:
        print("index_build_job failed; see the run log above", file=sys.stderr)
        return 1
    resources = defs.resources
    report = json.loads((resources["storage"].layout().root / "evaluation.json").read_text())
    print("\nEvaluation (configuration: metrics):")
    for name, metrics in report["runs"].items():
        marker = " (default)" if name == report["default"] else ""
        print(f"  {name}{marker}: " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    gold = resources["catalog"].gold()
    sample = args.query or (next(iter(gold.queries.values())) if gold else "search")
    print()
    _print_result(resources["search"].search(sample, top_k=5))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from retrieval_assets.definitions import defs

    filters = json.loads(args.filters) if args.filters else None
    result = defs.resources["search"].search(args.query, top_k=args.top_k, filters=filters)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _print_result(result)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from retrieval_assets.core.benchmark import run_benchmark
    from retrieval_assets.core.encoders.configured import dense_encoder_for, sparse_encoder_for
    from retrieval_assets.core.settings import PipelineSettings

    dataset = Path(args.dataset)
    if not (dataset / "corpus.jsonl").exists():
        print(f"{dataset} is not a BEIR directory (no corpus.jsonl)", file=sys.stderr)
        return 2
    settings = PipelineSettings()
    dense, sparse = dense_encoder_for(settings.models), sparse_encoder_for(settings.models)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="retrieval-bench-"))
    try:
        figures = run_benchmark(dataset, workdir, dense, sparse, settings, progress=_tqdm_progress)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    line = json.dumps(figures)
    if args.json_out:
        Path(args.json_out).write_text(line + "\n")
    print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrieval-assets", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="materialize every asset, evaluate, and show a sample query")
    run.add_argument("--query", help="sample query to show (default: the first gold query)")
    run.set_defaults(func=cmd_run)

    search = sub.add_parser("search", help="query the current indexes")
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--filters", help='JSON, e.g. \'{"tenant_id": "acme", "year": {"gte": 2019}}\'')
    search.add_argument("--json", action="store_true", help="print the full result with provenance as JSON")
    search.set_defaults(func=cmd_search)

    bench = sub.add_parser("bench", help="build and evaluate a BEIR directory in a scratch location")
    bench.add_argument("--dataset", required=True, help="BEIR directory: corpus.jsonl, queries.jsonl, qrels/test.tsv")
    bench.add_argument("--json-out", help="also write the result JSON to this file")
    bench.add_argument("--workdir", help="keep the built indexes here instead of a temporary directory")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
