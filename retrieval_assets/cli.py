"""``retrieval-assets``: run the main job, search the current index, benchmark a BEIR dataset."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval_assets.core.models import FusionMethod, RetrievalResult, SearchRequest, Strategy

if TYPE_CHECKING:
    from retrieval_assets.core.retrieval.searcher import Searcher

CLIENT_KEY_ENV = "RETRIEVAL_ASSETS_API_KEY"  # the token loadtest and bench-document-flow send


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


@contextmanager
def _workdir(requested: str | None, prefix: str) -> Iterator[Path]:
    """``requested`` (kept afterwards), or a temporary directory removed at the end."""
    if requested:
        yield Path(requested)
        return
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _machine() -> dict[str, object]:
    """The CPU beside every figure: INT8 models run 2-3x slower without AVX-512 VNNI."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": model, "avx512_vnni": "avx512_vnni" in flags, "cores": os.cpu_count()}


def _emit_json(figures: dict, json_out: str | None) -> int:
    """Benchmark figures, with the machine, as the last stdout line (and to ``json_out``)."""
    line = json.dumps({**figures, "machine": _machine()})
    if json_out:
        Path(json_out).write_text(line + "\n")
    print(line)
    return 0


def _print_result(result: RetrievalResult) -> None:
    flags = [name for name, on in (("reranked", result.reranked), ("REFINE requested", result.refine)) if on]
    print(f"query: {result.query!r}  strategies: {', '.join(result.strategies)}  fusion: {result.fusion}  "
          f"{' '.join(flags)}  ({result.timings_ms.get('total_ms', 0):.0f} ms)")
    diagnostics = result.diagnostics
    for label, key in (("searched as", "query"), ("filters", "filters"), ("more like", "more_like_this"),
                       ("context tokens", "context_tokens"), ("excluded", "excluded_ids")):
        if diagnostics.get(key) and (key != "query" or diagnostics[key] != result.query):
            print(f"  {label}: {diagnostics[key]}")
    for rank, hit in enumerate(result.hits, start=1):
        per_strategy = "  ".join(f"{name}#{s.rank}={s.score:.3f}" for name, s in hit.strategy_scores.items())
        title = hit.title or hit.text[:80]
        print(f"{rank:>3}. {hit.score:.4f}  {hit.doc_id}  [{hit.chunk_id}, {hit.section}]  {title[:90]}")
        print(f"     {per_strategy}" + (f"  via graph: {' > '.join(hit.graph_path)}" if hit.graph_path else ""))


def _instance():
    """The Dagster instance under $DAGSTER_HOME, so runs show in `dagster dev`; else an ephemeral one."""
    from dagster import DagsterInstance

    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()


def cmd_run(args: argparse.Namespace) -> int:
    """The nightly flow in one process: the whole incremental build, then (as the candidate sensor
    would) evaluation and the promotion gate; prints the verdict and a sample query."""
    from retrieval_assets.definitions import configured_search, defs
    from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG

    # With $DAGSTER_HOME set the runs are recorded where `dagster dev` shows them.
    instance = _instance()
    build = defs.resolve_job_def("index_build_job").execute_in_process(instance=instance, raise_on_error=False)
    if not build.success:
        print("index_build_job failed; see the run log above", file=sys.stderr)
        return 1
    resources = defs.resources
    versions = resources["storage"].versions()
    candidate = build.output_for_node("index_version").version
    # As the candidate sensor does: a version evaluated before (nothing changed) is not evaluated
    # again, and the run is tagged with the version it judges.
    if versions.version(candidate).evaluation() is None:
        evaluation = defs.resolve_job_def("evaluation_job").execute_in_process(
            instance=instance, tags={EVALUATED_VERSION_TAG: candidate}, raise_on_error=False
        )
        if not evaluation.success and versions.version(candidate).evaluation() is None:
            print("evaluation_job failed; see the run log above", file=sys.stderr)
            return 1
    report = versions.version(candidate).evaluation() or {}
    print(f"\nCandidate {candidate}, evaluation (configuration: metrics):")
    for name, metrics in report.get("runs", {}).items():
        marker = " (served)" if name == (report.get("served") or report["default"]) else ""
        print(f"  {name}{marker}: " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    gate = report.get("gate", {})
    verdict = "passed" if gate.get("passed") else "REFUSED: " + "; ".join(gate.get("reasons", []))
    promoted = versions.promoted()
    print(f"Promotion gate: {verdict}. Serving: {promoted.id if promoted else 'nothing'}")
    if promoted is None:
        return 1
    gold = resources["catalog"].gold()
    sample = args.query or (next(iter(gold.queries.values())) if gold else "search")
    print()
    with configured_search() as search:
        _print_result(search.search(sample, top_k=5))
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    """Every complete index version with its quality and whether it serves."""
    from retrieval_assets.definitions import defs

    for row in defs.resources["storage"].versions().quality_history():
        marker = "*" if row.pop("promoted") else " "
        print(f"{marker} " + "  ".join(f"{key}={value}" for key, value in row.items()))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    """Serve the previously promoted version again (or --to VERSION) through ``rollback_job``, so
    the Dagster UI records the switch on ``promoted_index`` just as the pointer moves."""
    from retrieval_assets.core.index.versions import VersionError
    from retrieval_assets.definitions import configured_storage, defs

    with configured_storage() as storage:
        versions = storage.versions()
        before = versions.promoted()
        try:
            versions.rollback_target(args.to)  # a bad target is a message, not a failed run
        except VersionError as exc:
            print(f"rollback: {exc}", file=sys.stderr)
            return 2
    run_config = {"ops": {"rollback_promoted_version": {"config": {"to_version": args.to}}}}
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=_instance(), run_config=run_config, raise_on_error=False
    )
    if not result.success:
        print("rollback: rollback_job failed; see the run log above", file=sys.stderr)
        return 1
    with configured_storage() as storage:
        target = storage.versions().promoted()
    print(f"serving {target.id} (was {before.id if before else 'nothing'})")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from retrieval_assets.definitions import configured_search

    request = SearchRequest(
        query=args.query,
        top_k=args.top_k,
        filters=json.loads(args.filters) if args.filters else None,
        tenant_id=args.tenant,
        strategies=args.strategies.split(",") if args.strategies else None,
        fusion=args.fusion,
        rerank=args.rerank,
        expand=args.expand,
        multi_query=args.multi_query,
        context_files=args.context_file or [],
        context_metadata=json.loads(args.context_metadata) if args.context_metadata else {},
    )
    with configured_search() as search:
        result = search.run(request)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _print_result(result)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Build a BEIR directory with the product's build job and evaluate every configuration
    through its evaluation job, in a scratch home; the last stdout line is the JSON figures."""
    from retrieval_assets.bench import run_benchmark

    dataset = Path(args.dataset)
    if not (dataset / "corpus.jsonl").exists():
        print(f"{dataset} is not a BEIR directory (no corpus.jsonl)", file=sys.stderr)
        return 2
    with _workdir(args.workdir, "retrieval-bench-") as workdir:
        figures = run_benchmark(dataset, workdir, rerank=not args.no_rerank)
    return _emit_json(figures, args.json_out)


def cmd_bench_incremental(args: argparse.Namespace) -> int:
    """Full build, no-change re-run, changed re-runs; the last stdout line is the JSON figures."""
    from retrieval_assets.bench import run_incremental_benchmark
    from retrieval_assets.core.ingest.catalog import catalog_file

    dataset = Path(args.dataset)
    catalog_file(dataset, args.format)  # a missing corpus is reported before the models load
    if args.resume and not args.workdir:
        print("bench-incremental: --resume needs the --workdir of the run that made the full build", file=sys.stderr)
        return 2
    with _workdir(args.workdir, "retrieval-incremental-") as workdir:
        figures = run_incremental_benchmark(
            dataset, args.format, workdir, args.changed_fraction, changed_runs=args.changed_runs, resume=args.resume
        )
    return _emit_json(figures, args.json_out)


def cmd_bench_latency(args: argparse.Namespace) -> int:
    """Query P50/P95 per backend over one built version; the last stdout line is the JSON figures."""
    import gc

    from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
    from retrieval_assets.core.evaluation.benchmark import latency_by_configuration, peak_rss_mb
    from retrieval_assets.core.index.versions import IndexVersions
    from retrieval_assets.core.retrieval.searcher import open_retriever
    from retrieval_assets.core.settings import PipelineSettings
    from retrieval_assets.serving.loadtest import load_queries

    versions = IndexVersions(args.index_root)
    sealed = versions.sealed()
    version = versions.version(args.version) if args.version else (sealed[-1] if sealed else None)
    if version is None or not version.sealed:
        print(f"bench-latency: no complete index version {args.version or ''} under {args.index_root}", file=sys.stderr)
        return 2
    queries = load_queries(args.queries)
    settings = PipelineSettings()
    retriever = open_retriever(
        version.layout,
        dense_encoder=dense_encoder_for(settings.models),
        sparse_encoder=sparse_encoder_for(settings.models),
        settings=settings.retrieval,
    )
    gc.collect()
    gc.freeze()  # as a serving process: loading garbage is not traversed during the timed queries
    try:
        runs = latency_by_configuration(retriever, queries, progress=_tqdm_progress)
    finally:
        retriever.close()
    figures = {
        "version": version.id,
        "chunks": version.manifest().get("chunks"),
        "queries": len(queries),
        "runs": runs,
        "peak_rss_mb": round(peak_rss_mb(), 1),  # the models plus every open index: what serving holds
    }
    return _emit_json(figures, args.json_out)


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP API (retrieval_assets.serving) over the code location's search resource, with
    uvicorn in one process: the embedded Qdrant shard allows one open handle per process, and
    requests share the retriever's threads."""
    import uvicorn

    from retrieval_assets.serving.auth import ApiKeys, is_loopback

    keys, source = ApiKeys.from_environment()
    if keys is None and not is_loopback(args.host):
        print(
            f"retrieval-assets serve: refusing to bind {args.host} without API keys ({source}): every caller "
            "would read and write every tenant. Bind 127.0.0.1, or configure keys (retrieval-assets api-key create).",
            file=sys.stderr,
        )
        return 2
    if keys is None:
        print(f"serve: no API keys ({source}): serving {args.host} only, every local caller is trusted", file=sys.stderr)
    else:
        print(f"serve: {len(keys)} API keys from {source}; every route but /health needs one", file=sys.stderr)

    from retrieval_assets.definitions import configured_search, defs
    from retrieval_assets.serving import create_app
    from retrieval_assets.serving.admission import AdmissionLimits
    from retrieval_assets.serving.http_api import default_limits

    defaults = default_limits()
    limits = AdmissionLimits(args.search_concurrency or defaults.concurrency, args.queue_depth)
    catalog = defs.resources["catalog"]
    with configured_search() as search:
        app = create_app(
            search.searcher, catalog_format=catalog.format, default_tenant=catalog.tenant_id, keys=keys, limits=limits
        )
        _freeze_long_lived_heap(search.searcher)
        uvicorn.run(app, host=args.host, port=args.port, access_log=args.access_log)
    return 0


def _freeze_long_lived_heap(searcher: Searcher) -> None:
    """Open the promoted version, then move everything alive (code, Dagster definitions, models,
    indexes: about 700k objects) out of the cyclic collector's sight. Every search allocates
    thousands of short-lived objects, and each collection they trigger rescanned that heap:
    1.2 ms of a search's CPU went to the collector, 0.3 ms once frozen (README "HTTP load")."""
    import gc

    from retrieval_assets.serving.service import UNAVAILABLE_ERRORS

    try:
        searcher.retriever()
    except UNAVAILABLE_ERRORS:
        pass  # nothing promoted yet: the app says so on /health and opens the version later
    gc.collect()
    gc.freeze()


def cmd_api_key_create(args: argparse.Namespace) -> int:
    """A new key: its token is printed once; the server keeps only the record (its digest)."""
    from retrieval_assets.serving.auth import new_key, read_keys, write_keys

    token, key = new_key(args.id, args.tenant, args.scope, args.requests_per_minute)
    if args.keys_file:
        path = Path(args.keys_file)
        existing = read_keys(path)
        if any(other.id == key.id for other in existing):
            raise ValueError(f"{path} already has a key {key.id!r}: revoke it first")
        write_keys(path, [*existing, key])
        print(f"added key {key.id!r} to {path} (restart serve to apply)", file=sys.stderr)
    print("the token (first line) is shown this once; the server keeps only the record (second line)", file=sys.stderr)
    print(token)
    print(json.dumps(key.model_dump()))
    return 0


def cmd_api_key_revoke(args: argparse.Namespace) -> int:
    from retrieval_assets.serving.auth import read_keys, write_keys

    path = Path(args.keys_file)
    keys = read_keys(path)
    kept = [key for key in keys if key.id != args.id]
    if len(kept) == len(keys):
        raise ValueError(f"{path} has no key {args.id!r}")
    write_keys(path, kept)
    print(f"revoked key {args.id!r} in {path} (restart serve to apply)", file=sys.stderr)
    return 0


def _client_headers() -> dict[str, str]:
    """The API key a client command sends: ``RETRIEVAL_ASSETS_API_KEY`` (not an argument, so that
    it stays out of shell history and the process list)."""
    token = os.environ.get(CLIENT_KEY_ENV, "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def cmd_loadtest(args: argparse.Namespace) -> int:
    """POST /search at each concurrency level; the last stdout line is the JSON figures."""
    from retrieval_assets.serving.loadtest import load_queries, run_load_test

    try:
        levels = [int(level) for level in args.concurrency.split(",")]
        figures = run_load_test(
            args.url,
            levels,
            args.requests,
            load_queries(args.queries),
            max_seconds=args.max_seconds,
            top_k=args.top_k,
            progress=_tqdm_progress,
            headers=_client_headers(),
        )
    except (OSError, ValueError) as exc:  # an unreadable query file, a bad level list
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    return _emit_json(figures, args.json_out)


def cmd_bench_auth(args: argparse.Namespace) -> int:
    """POST /search P50 at concurrency 1 without and with an API key, over the promoted version;
    the last stdout line is the JSON figures (exit 1 when the overhead misses its target)."""
    from retrieval_assets.definitions import configured_search, defs
    from retrieval_assets.serving import create_app
    from retrieval_assets.serving.auth import ApiKeys, new_key
    from retrieval_assets.serving.auth_bench import measure_auth_overhead
    from retrieval_assets.serving.loadtest import load_queries

    queries = load_queries(args.queries)
    catalog = defs.resources["catalog"]
    token, key = new_key("bench", [catalog.tenant_id], ["search"], requests_per_minute=10_000_000)
    with configured_search() as search:
        apps = [
            create_app(search.searcher, catalog_format=catalog.format, default_tenant=catalog.tenant_id, keys=keys)
            for keys in (None, ApiKeys([key]))
        ]
        figures = measure_auth_overhead(
            *apps,
            token,
            catalog.tenant_id,
            queries,
            requests=args.requests,
            rounds=args.rounds,
            progress=_tqdm_progress("bench-auth"),
        )
    _emit_json(figures, args.json_out)
    return 0 if figures["target_met"] else 1


def cmd_bench_document_flow(args: argparse.Namespace) -> int:
    """POST a document and time it until /search finds it; the last stdout line is the JSON figures."""
    import httpx

    from retrieval_assets.serving.document_flow import measure_document_flow

    try:
        figures = measure_document_flow(args.url, args.tenant, args.timeout, headers=_client_headers())
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"bench-document-flow: {exc}", file=sys.stderr)
        return 2
    code = _emit_json(figures, args.json_out)
    return code if figures["searchable_seconds"] is not None else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrieval-assets", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="build a candidate, evaluate it, promote it if it passes, show a sample query")
    run.add_argument("--query", help="sample query to show (default: the first gold query)")
    run.set_defaults(func=cmd_run)

    versions = sub.add_parser("versions", help="list index versions, their quality and which one serves (*)")
    versions.set_defaults(func=cmd_versions)

    rollback = sub.add_parser("rollback", help="serve the previously promoted index version again")
    rollback.add_argument("--to", help="a specific version id (see `versions`)")
    rollback.set_defaults(func=cmd_rollback)

    search = sub.add_parser("search", help="query the promoted index version")
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--filters", help='JSON, e.g. \'{"tenant_id": "acme", "year": {"gte": 2019}}\'')
    search.add_argument("--tenant", help="only this tenant's documents")
    search.add_argument("--strategies", help=f"comma-separated subset of {','.join(Strategy)}")
    search.add_argument("--fusion", type=FusionMethod, choices=list(FusionMethod))
    search.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None, help="cross-encoder rerank")
    search.add_argument("--expand", action=argparse.BooleanOptionalAction, default=None, help="vocabulary expansion")
    search.add_argument("--multi-query", action=argparse.BooleanOptionalAction, default=None,
                        help="search reformulations and fuse them")
    search.add_argument("--context-file", action="append", help="attached file name, e.g. scan.dcm (repeatable)")
    search.add_argument("--context-metadata", help='attached metadata as JSON, e.g. \'{"modality": "CT"}\'')
    search.add_argument("--json", action="store_true", help="print the full result with provenance as JSON")
    search.set_defaults(func=cmd_search)

    bench = sub.add_parser("bench", help="build and evaluate a BEIR directory in a scratch location")
    bench.add_argument("--dataset", required=True, help="BEIR directory: corpus.jsonl, queries.jsonl, qrels/test.tsv")
    bench.add_argument("--json-out", help="also write the result JSON to this file")
    bench.add_argument("--workdir", help="keep the built indexes here instead of a temporary directory")
    bench.add_argument("--no-rerank", action="store_true", help="skip the hybrid+rerank configuration")
    bench.set_defaults(func=cmd_bench)

    incremental = sub.add_parser(
        "bench-incremental",
        help="time a full build, a no-change re-run, 1%%-changed re-runs rebuilt in full and as a delta, one changed document",
    )
    incremental.add_argument("--dataset", required=True, help="BEIR directory, or a JSONL tool catalog with --format")
    incremental.add_argument("--format", choices=["beir", "tool_catalog"], default="beir")
    incremental.add_argument("--changed-fraction", type=float, default=0.01, help="share of documents changed")
    incremental.add_argument(
        "--changed-runs", type=int, default=1, help="successive delta re-runs, each changing another share (the first is delta_one_percent)"
    )
    incremental.add_argument("--workdir", help="keep the versions and the cache here instead of a temporary directory")
    incremental.add_argument(
        "--resume",
        action="store_true",
        help="time only the re-runs, against the full build an earlier run recorded in --workdir "
        "(its time and version)",
    )
    incremental.add_argument("--json-out", help="also write the result JSON to this file")
    incremental.set_defaults(func=cmd_bench_incremental)

    latency = sub.add_parser("bench-latency", help="query P50/P95 per backend (bm25, dense, splade, hybrid) of a version")
    latency.add_argument("--index-root", required=True, help="an indexes/ directory (versions/ and promoted.json)")
    latency.add_argument("--version", help="version id (default: the newest complete one)")
    latency.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    latency.add_argument("--json-out", help="also write the result JSON to this file")
    latency.set_defaults(func=cmd_bench_latency)

    serve = sub.add_parser("serve", help="serve the HTTP API (search, stream, documents, health) with uvicorn")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True, help="log every request")
    serve.add_argument(
        "--search-concurrency", type=int, help="searches run at once (default: one per core; more for engines on servers)"
    )
    serve.add_argument(
        "--queue-depth", type=int, default=64, help="searches that may wait for a slot; past it, 503 with Retry-After"
    )
    serve.set_defaults(func=cmd_serve)

    api_key = sub.add_parser("api-key", help="make or revoke API keys for `serve` (see the README's security model)")
    api_key_actions = api_key.add_subparsers(dest="action", required=True)
    create = api_key_actions.add_parser("create", help="print a new token once, and the record the server keeps")
    create.add_argument("--id", required=True, help="the key's name: letters, digits, - and _ (shown in logs and inbox entries)")
    create.add_argument("--tenant", action="append", required=True, help="a tenant the key may read and write (repeatable)")
    create.add_argument(
        "--scope", action="append", required=True, choices=["search", "documents:write", "admin"], help="repeatable"
    )
    create.add_argument("--requests-per-minute", type=int, default=1_200)
    create.add_argument("--keys-file", help="add the record to this keys file (RETRIEVAL_ASSETS_API_KEYS_FILE)")
    create.set_defaults(func=cmd_api_key_create)
    revoke = api_key_actions.add_parser("revoke", help="remove a key from a keys file")
    revoke.add_argument("--id", required=True)
    revoke.add_argument("--keys-file", required=True)
    revoke.set_defaults(func=cmd_api_key_revoke)

    loadtest = sub.add_parser("loadtest", help="load-test a running API's POST /search at several concurrency levels")
    loadtest.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of `retrieval-assets serve`")
    loadtest.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrency levels")
    loadtest.add_argument("--requests", type=int, default=200, help="measured requests per level")
    loadtest.add_argument("--max-seconds", type=float, default=60.0, help="time limit per level")
    loadtest.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    loadtest.add_argument("--top-k", type=int, default=10)
    loadtest.add_argument("--json-out", help="also write the result JSON to this file")
    loadtest.set_defaults(func=cmd_loadtest)

    auth = sub.add_parser(
        "bench-auth", help="POST /search P50 at concurrency 1 with an API key and without (target: +1 ms at most)"
    )
    auth.add_argument("--requests", type=int, default=400, help="measured requests per arm")
    auth.add_argument("--rounds", type=int, default=4, help="rotating rounds the requests are split into")
    auth.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    auth.add_argument("--json-out", help="also write the result JSON to this file")
    auth.set_defaults(func=cmd_bench_auth)

    flow = sub.add_parser(
        "bench-document-flow", help="seconds from POST /documents to a /search hit, on a served API with the daemon"
    )
    flow.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of `retrieval-assets serve`")
    flow.add_argument("--tenant", help="post and search as this tenant (default: the server's default)")
    flow.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    flow.add_argument("--json-out", help="also write the result JSON to this file")
    flow.set_defaults(func=cmd_bench_document_flow)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, json.JSONDecodeError) as exc:
        # Bad input (a malformed tag, filter or JSON option) is a message, not a traceback.
        print(f"retrieval-assets {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
