"""``retrieval-assets``: run the main job, search the current index, serve it, benchmark it.

This module parses arguments and dispatches: the work lives in ``runs``/``definitions`` (the
jobs), ``serving`` (the HTTP API and its start-up), ``bench`` (benchmarks and load tools) and
``console`` (what is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval_assets.core.models import FusionMethod, SearchRequest, Strategy


def _instance():
    """The Dagster instance under $DAGSTER_HOME, so runs show in `dagster dev`; else an ephemeral one."""
    from dagster import DagsterInstance

    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()


def _resource(key: str) -> Any:
    """The code location's resource ``key`` as it is defined (imported late: loading the
    definitions takes seconds that ``--help`` should not pay)."""
    from retrieval_assets.definitions import code_location_resource

    return code_location_resource(key)


def cmd_run(args: argparse.Namespace) -> int:
    """The nightly flow in one process: the whole incremental build, then (as the candidate sensor
    would) evaluation and the promotion gate; prints progress, the verdict and a sample query."""
    from retrieval_assets import console

    console.quiet_dependencies()
    from retrieval_assets.definitions import configured_search, defs
    from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
    from retrieval_assets.defs.io_manager import stored_value
    from retrieval_assets.runs import materialized, run_job

    # With $DAGSTER_HOME set the runs are recorded where `dagster dev` shows them.
    instance = _instance()
    catalog, storage = _resource("catalog"), _resource("storage")
    run_config: dict[str, Any] = dict(console.QUIET_RUN_CONFIG)
    if args.source:
        # The catalog resource configured for these runs only, as the launchpad would.
        paths = [str(Path(path).resolve()) for path in args.source]
        config = {"format": args.kind or "auto", "path": paths[0], "extra_sources": paths[1:], "gold_path": None}
        run_config["resources"] = {"catalog": {"config": config}}
        catalog = catalog.model_copy(update=config)
    sources = catalog.sources()
    named = ", ".join(f"{name} ({source.format})" for name, source in sources.items() if source.format != "inbox")
    print(f"Building an index version of {named} ...", flush=True)
    build = run_job(defs.resolve_job_def("index_build_job"), instance, run_config)
    if not build.success:
        for line in console.failed_check_lines(build):
            print(line, file=sys.stderr)
        print("index_build_job failed; see the run log above", file=sys.stderr)
        return 1
    versions = storage.versions()
    record = stored_value(storage.artifacts_dir, "index_version")
    candidate = record.version
    cleaned, chunks = materialized(build, "cleaned_documents"), materialized(build, "chunks")
    print(
        console.build_line(
            candidate,
            record.reused,
            int(cleaned.get("documents", 0)),
            int(cleaned.get("quarantined", 0)),
            int(chunks.get("chunks", 0)),
        )
    )
    # As the candidate sensor does: a version evaluated before (nothing changed) is not evaluated
    # again, and the run is tagged with the version it judges.
    if versions.version(candidate).evaluation() is None:
        print(f"Evaluating {candidate} on the gold queries and applying the promotion gate ...", flush=True)
        evaluation = run_job(
            defs.resolve_job_def("evaluation_job"), instance, run_config, tags={EVALUATED_VERSION_TAG: candidate}
        )
        if not evaluation.success and versions.version(candidate).evaluation() is None:
            print("evaluation_job failed; see the run log above", file=sys.stderr)
            return 1
    report = versions.version(candidate).evaluation() or {}
    print()
    print("\n".join(console.evaluation_lines(candidate, report)))
    promoted = versions.promoted()
    print(console.verdict_line(report, promoted.id if promoted else None))
    if promoted is None:
        return 1
    gold = catalog.gold()
    # Without gold, the first document's title (or its first words) asks for something it holds.
    sample = args.query or (
        next(iter(gold.queries.values()))
        if gold
        else console.sample_query(
            stored_value(storage.artifacts_dir, "cleaned_documents", {"columns": ["title", "text"]})
        )
    )
    print()
    with configured_search() as search:
        print("\n".join(console.result_lines(search.search(sample, top_k=5))))
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    """Every complete index version with its quality and whether it serves."""
    for row in _resource("storage").versions().quality_history():
        marker = "*" if row.pop("promoted") else " "
        forced = row.pop("forced_rollback", None)
        line = f"{marker} " + "  ".join(f"{key}={value}" for key, value in row.items())
        # A version served past a refused gate says so, on the line of its own.
        print(line + (f"  FORCED ROLLBACK ({forced})" if forced else ""))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    """Serve the previously promoted version again (or --to VERSION) through ``rollback_job``, so
    the Dagster UI records the switch on ``promoted_index`` just as the pointer moves. A version
    the promotion gate refused needs --force, and the history records the rollback as forced."""
    import getpass

    from retrieval_assets.core.index.versions import RefusedVersionError, VersionError
    from retrieval_assets.definitions import configured_storage, defs

    with configured_storage() as storage:
        versions = storage.versions()
        before = versions.promoted()
        try:
            # A bad target is a message, not a failed run; so is a refused one without --force.
            versions.check_rollback(versions.rollback_target(args.to), args.force)
        except RefusedVersionError as exc:
            print(f"rollback: {exc}. Add --force to roll back to it anyway (and --reason to say why).", file=sys.stderr)
            return 2
        except VersionError as exc:
            print(f"rollback: {exc}", file=sys.stderr)
            return 2
    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = None
    config = {"to_version": args.to, "force": args.force, "requested_by": user, "reason": args.reason}
    run_config = {"ops": {"rollback_promoted_version": {"config": config}}}
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=_instance(), run_config=run_config, raise_on_error=False
    )
    if not result.success:
        print("rollback: rollback_job failed; see the run log above", file=sys.stderr)
        return 1
    with configured_storage() as storage:
        target = storage.versions().promoted()
    if target is None:  # a successful rollback_job has promoted a version
        raise RuntimeError("rollback_job succeeded but no version is promoted")
    print(f"serving {target.id} (was {before.id if before else 'nothing'})")
    verdict, reasons = target.gate_verdict()
    if verdict == "refused":
        print(f"forced: the promotion gate refused {target.id} ({'; '.join(reasons)}); recorded in the history")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from retrieval_assets.console import result_lines
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
        print("\n".join(result_lines(result)))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.beir import bench_beir

    return bench_beir(
        Path(args.dataset),
        args.workdir,
        rerank=not args.no_rerank,
        json_out=args.json_out,
        generated_gold=args.generated_gold,
    )


def cmd_bench_gold_sensitivity(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.gold_sensitivity import bench_gold_sensitivity

    return bench_gold_sensitivity(Path(args.dataset), args.workdir, args.breaks, args.json_out)


def cmd_bench_incremental(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.incremental import bench_incremental

    return bench_incremental(
        Path(args.dataset),
        args.format,
        args.workdir,
        args.changed_fraction,
        args.changed_runs,
        args.resume,
        args.json_out,
    )


def cmd_bench_scale(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.scale import bench_scale

    return bench_scale(
        Path(args.dataset),
        args.chunks,
        args.base_documents,
        args.queries,
        args.approximate_from_chunks,
        args.workdir,
        args.json_out,
    )


def cmd_bench_encoders(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.encoders import bench_encoders
    from retrieval_assets.core.settings import ModelSettings

    return bench_encoders(
        Path(args.dataset),
        args.documents,
        args.alone,
        ModelSettings(
            device=args.device,
            dense_endpoint=args.dense_endpoint,
            **({"dense_model": args.dense_model} if args.dense_model else {}),
        ),
        args.reference,
        args.reference_out,
        args.json_out,
    )


def cmd_bench_latency(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.latency import bench_latency

    return bench_latency(Path(args.index_root), args.version, args.queries, args.json_out)


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP API over the code location's search resource (``serving.server``)."""
    from retrieval_assets.serving.server import api_keys_for, run_server

    keys = api_keys_for(args.host)
    from retrieval_assets.definitions import configured_search

    catalog = _resource("catalog")
    with configured_search() as search:
        run_server(
            search.service,
            catalog_format=catalog.format,
            default_tenant=catalog.tenant_id,
            keys=keys,
            host=args.host,
            port=args.port,
            access_log=args.access_log,
            search_concurrency=args.search_concurrency,
            queue_depth=args.queue_depth,
        )
    return 0


def cmd_api_key_create(args: argparse.Namespace) -> int:
    """A new key: its token is printed once; the server keeps only the record (its digest)."""
    from retrieval_assets.serving.auth import add_key, new_key

    token, key = new_key(args.id, args.tenant, args.scope, args.requests_per_minute)
    if args.keys_file:
        add_key(Path(args.keys_file), key)
        print(f"added key {key.id!r} to {args.keys_file} (restart serve to apply)", file=sys.stderr)
    print("the token (first line) is shown this once; the server keeps only the record (second line)", file=sys.stderr)
    print(token)
    print(json.dumps(key.model_dump()))
    return 0


def cmd_api_key_revoke(args: argparse.Namespace) -> int:
    from retrieval_assets.serving.auth import revoke_key

    revoke_key(Path(args.keys_file), args.id)
    print(f"revoked key {args.id!r} in {args.keys_file} (restart serve to apply)", file=sys.stderr)
    return 0


def cmd_loadtest(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.loadtest import loadtest

    return loadtest(
        args.url, args.concurrency, args.requests, args.queries, args.max_seconds, args.top_k, args.json_out
    )


def cmd_bench_auth(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.auth_overhead import bench_auth

    return bench_auth(args.requests, args.rounds, args.queries, args.json_out)


def cmd_bench_document_writes(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.document_writes import bench_document_writes

    return bench_document_writes(args.url, args.records, args.repeat, args.corpus, args.tenant, args.json_out)


def cmd_bench_document_flow(args: argparse.Namespace) -> int:
    from retrieval_assets.bench.document_flow import bench_document_flow

    return bench_document_flow(args.url, args.tenant, args.timeout, args.json_out)


def _gold_catalog(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The catalog whose gold a ``gold`` command works on: the configured one, or --source's (as
    ``run --source`` configures it), with that configuration for a run."""
    catalog = _resource("catalog")
    if not args.source:
        return catalog, None
    paths = [str(Path(path).resolve()) for path in args.source]
    config = {"format": args.kind or "auto", "path": paths[0], "extra_sources": paths[1:], "gold_path": None}
    return catalog.model_copy(update=config), config


def cmd_gold_add(args: argparse.Namespace) -> int:
    """Append one judgement to the catalog's curated gold file."""
    from retrieval_assets.core.evaluation.gold.curated import append_curated, load_curated
    from retrieval_assets.defs.assets.gold import curated_gold_file

    catalog, _ = _gold_catalog(args)
    storage = _resource("storage")
    judged = curated_gold_file(catalog, storage)
    path = Path(args.file) if args.file else judged
    append_curated(path, args.query, args.expect, args.grade)
    print(f"added to {path}: {len(load_curated(path).queries)} curated queries")
    if path.resolve() != judged.resolve():
        print(f"the gate judges {catalog.path} with {judged}: set the catalog's curated_gold_path to {path} to use it")
    elif not catalog.curated_gold_path:
        print(f"kept with the catalog's gold under {storage.gold_dir}; set curated_gold_path to keep it elsewhere")
    if catalog.gold() is not None:
        print("this catalog has BEIR gold of its own, which the gate judges with instead")
    return 0


def cmd_gold_show(args: argparse.Namespace) -> int:
    """The gold the gate judges the catalog with, and its generated gold."""
    from retrieval_assets.defs.assets.gold import age_days, catalog_gold

    catalog, _ = _gold_catalog(args)
    storage = _resource("storage")
    gold = catalog_gold(catalog, storage)
    print(f"catalog: {catalog.path} (gold key {catalog.gold_key()})")
    if gold.gold is None:
        print("gold: none yet; the next evaluation draws known-item gold from the documents (or `gold redraw`)")
        return 0
    print(f"kind: {gold.kind}")
    print(f"size: {len(gold.gold.queries)} queries")
    print(f"fingerprint: {gold.fingerprint}")
    print(f"source: {gold.source}")
    generated = gold.generated
    if gold.kind == "curated":
        print("method: judged by a person" + (" (BEIR qrels)" if "BEIR" in gold.source else ""))
    if generated is not None:
        prefix = "generated (judged beside it) " if gold.kind == "curated" else ""
        if prefix:
            print(f"{prefix}kind: {generated.kind}, {len(generated.queries)} queries, {generated.fingerprint[:16]}")
        print(f"{prefix}method: {generated.method}")
        print(f"{prefix}age: {age_days(generated)} days (drawn {generated.created_at})")
        print(f"{prefix}retired: {len(generated.retired)} queries whose documents were deleted")
        for warning in generated.warnings:
            print(f"{prefix}warning: {warning}")
    return 0


def cmd_gold_redraw(args: argparse.Namespace) -> int:
    """Draw the catalog's generated gold anew from the latest cleaned documents (``gold_redraw_job``)."""
    from retrieval_assets import console

    console.quiet_dependencies()
    from retrieval_assets.definitions import defs

    _, config = _gold_catalog(args)
    run_config: dict[str, Any] = {
        **console.QUIET_RUN_CONFIG,
        "ops": {"gold_queries": {"config": {"redraw": True, "seed": args.seed, "size": args.size}}},
    }
    if config is not None:
        run_config["resources"] = {"catalog": {"config": config}}
    result = defs.resolve_job_def("gold_redraw_job").execute_in_process(
        instance=_instance(), run_config=run_config, raise_on_error=False
    )
    if not result.success:
        print("gold_redraw_job failed (build the catalog first: it draws from cleaned_documents)", file=sys.stderr)
        return 1
    return cmd_gold_show(args)


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in ``--help`` ("none" when unset), unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or "") or action.required or not action.option_strings:
            return action.help
        if action.default is None:
            return f"{action.help} (default: none)"
        return super()._get_help_string(action)


def _command(commands: argparse._SubParsersAction, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows every option's default."""
    description = help.replace("%%", "%")  # help is %-formatted, a description is not
    return commands.add_parser(name, help=help, description=description, formatter_class=_DefaultsHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrieval-assets", description=(__doc__ or "").split("\n\n")[0], formatter_class=_DefaultsHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = _command(sub, "run", help="build a candidate, evaluate it, promote it if it passes, show a sample query")
    run.add_argument("--query", help="sample query to show (default: the first gold query, else a document's title)")
    run.add_argument(
        "--source",
        action="append",
        metavar="PATH",
        help="index this folder of files (PDF, HTML, Markdown, DOCX, text), table (Parquet, CSV, JSON Lines), "
        "JSONL or BEIR catalog, or Anthology data/ directory instead of the configured catalog; repeat for more "
        "(each its own tenant). Its kind is told from what it is (docs/sources.md)",
    )
    run.add_argument(
        "--kind",
        choices=["tool_catalog", "beir", "files", "table", "acl_anthology"],
        help="the first --source's kind, where it is not to be told from the path",
    )
    run.set_defaults(func=cmd_run)

    versions = _command(sub, "versions", help="list index versions, their quality and which one serves (*)")
    versions.set_defaults(func=cmd_versions)

    rollback = _command(sub, "rollback", help="serve the previously promoted index version again")
    rollback.add_argument("--to", help="a specific version id (see `versions`); default: the previously promoted one")
    rollback.add_argument(
        "--force",
        action="store_true",
        help="roll back to a version the promotion gate refused; recorded as a forced rollback (default: refuse)",
    )
    rollback.add_argument("--reason", help="why, recorded in the version history (default: none given)")
    rollback.set_defaults(func=cmd_rollback)

    search = _command(sub, "search", help="query the promoted index version")
    search.add_argument("query", help="what to search for; control tags such as tenant:acme narrow it")
    search.add_argument("--top-k", type=int, default=10, help="hits to return")
    search.add_argument("--filters", help='JSON, e.g. \'{"tenant_id": "acme", "year": {"gte": 2019}}\'')
    search.add_argument("--tenant", help="only this tenant's documents (default: every tenant)")
    search.add_argument(
        "--strategies", help=f"comma-separated subset of {','.join(Strategy)} (default: the served configuration's)"
    )
    search.add_argument(
        "--fusion",
        type=FusionMethod,
        choices=list(FusionMethod),
        help="how rankings are fused (default: the served configuration's)",
    )
    search.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cross-encoder rerank (default: as the served configuration)",
    )
    search.add_argument(
        "--expand",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vocabulary expansion (default: as the served configuration)",
    )
    search.add_argument(
        "--multi-query",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="search reformulations and fuse them (default: as the served configuration)",
    )
    search.add_argument("--context-file", action="append", help="attached file name, e.g. scan.dcm (repeatable)")
    search.add_argument("--context-metadata", help='attached metadata as JSON, e.g. \'{"modality": "CT"}\'')
    search.add_argument("--json", action="store_true", help="print the full result with provenance as JSON")
    search.set_defaults(func=cmd_search)

    bench = _command(sub, "bench", help="build and evaluate a BEIR directory in a scratch location")
    bench.add_argument("--dataset", required=True, help="BEIR directory: corpus.jsonl, queries.jsonl, qrels/test.tsv")
    bench.add_argument("--json-out", help="also write the result JSON to this file")
    bench.add_argument("--workdir", help="keep the built indexes here instead of a temporary directory")
    bench.add_argument("--no-rerank", action="store_true", help="skip the hybrid+rerank configuration")
    bench.add_argument(
        "--generated-gold",
        action="store_true",
        help="also judge every configuration on known-item gold generated from the built documents and report "
        "Kendall's tau against the real gold's ranking (JSON key generated_gold)",
    )
    bench.set_defaults(func=cmd_bench)

    sensitivity = _command(
        sub,
        "bench-gold-sensitivity",
        help="build a BEIR directory intact and deliberately broken, judged by its real gold and by generated gold "
        "alone: does the gate refuse each break with both?",
    )
    sensitivity.add_argument("--dataset", required=True, help="BEIR directory with real gold (qrels/test.tsv)")
    sensitivity.add_argument(
        "--breaks",
        nargs="+",
        metavar="BREAK",
        help="the broken candidates to judge (default: all): truncated, half_dropped, weaker_dense_model, no_stemming",
    )
    sensitivity.add_argument("--workdir", help="keep the homes and versions here instead of a temporary directory")
    sensitivity.add_argument("--json-out", help="also write the result JSON to this file")
    sensitivity.set_defaults(func=cmd_bench_gold_sensitivity)

    incremental = _command(
        sub,
        "bench-incremental",
        help="time a full build, a no-change re-run, 1%%-changed re-runs rebuilt in full and as a delta, "
        "one changed document",
    )
    incremental.add_argument("--dataset", required=True, help="BEIR directory, or a JSONL tool catalog with --format")
    incremental.add_argument("--format", choices=["beir", "tool_catalog"], default="beir", help="what --dataset holds")
    incremental.add_argument("--changed-fraction", type=float, default=0.01, help="share of documents changed")
    incremental.add_argument(
        "--changed-runs",
        type=int,
        default=1,
        help="successive delta re-runs, each changing another share (the first is delta_one_percent)",
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

    scale = _command(
        sub,
        "bench-scale",
        help="build a version of --chunks chunks grown from a real corpus and its real vectors (through the "
        "build job), then time serving, recall against exact search, one changed document and a 1%% delta",
    )
    scale.add_argument("--dataset", required=True, help="BEIR directory of the base corpus (e.g. the ACL Anthology)")
    scale.add_argument("--chunks", type=int, required=True, help="chunks of the grown version")
    scale.add_argument(
        "--base-documents", type=int, default=2000, help="base records with text, encoded for real (not timed)"
    )
    scale.add_argument("--queries", type=int, default=200, help="titles of base documents used as queries")
    scale.add_argument(
        "--approximate-from-chunks",
        type=int,
        help="the build's dense_index.approximate_from_chunks (default: the product's), to try HNSW on a small run",
    )
    scale.add_argument("--workdir", help="keep the versions and the cache here instead of a temporary directory")
    scale.add_argument("--json-out", help="also write the result JSON to this file")
    scale.set_defaults(func=cmd_bench_scale)

    encoders = _command(
        sub,
        "bench-encoders",
        help="the default dense and SPLADE encoders on the device a build uses (CUDA when torch sees a GPU): "
        "documents a second, query P50/P95, batched against alone, and against outputs kept on another machine",
    )
    encoders.add_argument("--dataset", required=True, help="BEIR directory: its first --documents records are encoded")
    encoders.add_argument("--documents", type=int, default=1000, help="records encoded in the encoders' batches")
    encoders.add_argument("--alone", type=int, default=64, help="of those, records also encoded one at a time")
    encoders.add_argument("--device", default="auto", help="auto or cuda (the GPU when torch sees one), or cpu")
    encoders.add_argument(
        "--dense-endpoint",
        help="an OpenAI-compatible embeddings API root (http://host:8000/v1): dense vectors from it, "
        "and the same model in process measured beside it",
    )
    encoders.add_argument("--dense-model", help="the dense model (with --dense-endpoint, the one it serves)")
    encoders.add_argument("--reference", help="outputs kept by --reference-out, to compare against (same records)")
    encoders.add_argument("--reference-out", help="keep this run's outputs here (.npz)")
    encoders.add_argument("--json-out", help="also write the result JSON to this file")
    encoders.set_defaults(func=cmd_bench_encoders)

    latency = _command(
        sub, "bench-latency", help="query P50/P95 per backend (bm25, dense, splade, hybrid) of a version"
    )
    latency.add_argument("--index-root", required=True, help="an indexes/ directory (versions/ and promoted.json)")
    latency.add_argument("--version", help="version id (default: the newest complete one)")
    latency.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    latency.add_argument("--json-out", help="also write the result JSON to this file")
    latency.set_defaults(func=cmd_bench_latency)

    serve = _command(sub, "serve", help="serve the HTTP API (search, stream, documents, health) with uvicorn")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind; any but loopback needs API keys")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True, help="log every request")
    serve.add_argument(
        "--search-concurrency",
        type=int,
        help="searches run at once (default: one per core; more for engines on servers)",
    )
    serve.add_argument(
        "--queue-depth", type=int, default=64, help="searches that may wait for a slot; past it, 503 with Retry-After"
    )
    serve.set_defaults(func=cmd_serve)

    api_key = _command(sub, "api-key", help="make or revoke API keys for `serve` (security model: docs/http-api.md)")
    api_key_actions = api_key.add_subparsers(dest="action", required=True)
    create = _command(api_key_actions, "create", help="print a new token once, and the record the server keeps")
    create.add_argument(
        "--id", required=True, help="the key's name: letters, digits, - and _ (shown in logs and inbox entries)"
    )
    create.add_argument(
        "--tenant", action="append", required=True, help="a tenant the key may read and write (repeatable)"
    )
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=["search", "documents:write", "admin"],
        help="a scope the key grants (repeatable)",
    )
    create.add_argument("--requests-per-minute", type=int, default=1_200, help="the key's rate limit")
    create.add_argument("--keys-file", help="add the record to this keys file (RETRIEVAL_ASSETS_API_KEYS_FILE)")
    create.set_defaults(func=cmd_api_key_create)
    revoke = _command(api_key_actions, "revoke", help="remove a key from a keys file")
    revoke.add_argument("--id", required=True, help="the id of the key to remove")
    revoke.add_argument("--keys-file", required=True, help="the keys file to remove it from")
    revoke.set_defaults(func=cmd_api_key_revoke)

    loadtest = _command(sub, "loadtest", help="load-test a running API's POST /search at several concurrency levels")
    loadtest.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of `retrieval-assets serve`")
    loadtest.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrency levels")
    loadtest.add_argument("--requests", type=int, default=200, help="measured requests per level")
    loadtest.add_argument("--max-seconds", type=float, default=60.0, help="time limit per level")
    loadtest.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    loadtest.add_argument("--top-k", type=int, default=10, help="hits each search asks for")
    loadtest.add_argument("--json-out", help="also write the result JSON to this file")
    loadtest.set_defaults(func=cmd_loadtest)

    auth = _command(
        sub, "bench-auth", help="POST /search P50 at concurrency 1 with an API key and without (target: +1 ms at most)"
    )
    auth.add_argument("--requests", type=int, default=400, help="measured requests per arm")
    auth.add_argument("--rounds", type=int, default=4, help="rotating rounds the requests are split into")
    auth.add_argument("--queries", help="query texts: one per line, or JSONL with text (default: built-in sample)")
    auth.add_argument("--json-out", help="also write the result JSON to this file")
    auth.set_defaults(func=cmd_bench_auth)

    flow = _command(
        sub,
        "bench-document-flow",
        help="seconds from POST /documents to a /search hit, on a served API with the daemon",
    )
    flow.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of `retrieval-assets serve`")
    flow.add_argument("--tenant", help="post and search as this tenant (default: the server's default)")
    flow.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    flow.add_argument("--json-out", help="also write the result JSON to this file")
    flow.set_defaults(func=cmd_bench_document_flow)

    writes = _command(
        sub,
        "bench-document-writes",
        help="server CPU per record of one POST /documents (serve a scratch home: the records are queued)",
    )
    writes.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of `retrieval-assets serve`")
    writes.add_argument("--records", type=int, default=1000, help="records in each POST")
    writes.add_argument("--repeat", type=int, default=3, help="posts to make (the figure is their median)")
    writes.add_argument("--corpus", help="JSON Lines records in the server's catalog format (default: made up)")
    writes.add_argument("--tenant", help="post as this tenant (default: the server's default)")
    writes.add_argument("--json-out", help="also write the result JSON to this file")
    writes.set_defaults(func=cmd_bench_document_writes)

    gold = _command(sub, "gold", help="the gold queries the promotion gate judges with: add curated ones, show, redraw")
    gold_actions = gold.add_subparsers(dest="action", required=True)

    def gold_command(name: str, help: str) -> argparse.ArgumentParser:
        command = _command(gold_actions, name, help=help)
        command.add_argument(
            "--source",
            action="append",
            metavar="PATH",
            help="the catalog, as `run --source` gives it, instead of the configured one; repeat for more",
        )
        command.add_argument(
            "--kind",
            choices=["tool_catalog", "beir", "files", "table", "acl_anthology"],
            help="the first --source's kind, where it is not to be told from the path",
        )
        return command

    add = gold_command("add", help="append a query and the document that answers it to the curated gold file")
    add.add_argument("query", help="the query, as a user would type it")
    add.add_argument("--expect", required=True, metavar="ID", help="the id of a document that answers the query")
    add.add_argument("--grade", type=int, default=1, help="how relevant the document is (0 not, 1 relevant, 2 ...)")
    add.add_argument(
        "--file",
        help="the CSV or JSON Lines file to append to (default: curated_gold_path, else "
        "<home>/gold/<catalog key>/curated.csv)",
    )
    add.set_defaults(func=cmd_gold_add)
    show = gold_command("show", help="the kind, size, fingerprint and method of the gold the gate judges with")
    show.set_defaults(func=cmd_gold_show)
    redraw = gold_command(
        "redraw", help="draw the generated gold anew from the latest build's cleaned documents (the old set stays)"
    )
    redraw.add_argument("--seed", type=int, default=13, help="the seed of the new draw")
    redraw.add_argument("--size", type=int, default=300, help="queries of the new draw")
    redraw.set_defaults(func=cmd_gold_redraw)
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
