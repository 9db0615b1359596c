"""``retrieval-assets bench-scale``: a version of N chunks built through the product's build job
from a real base corpus grown to size, then served and changed, each step measured.

What is real and what is synthetic (docs/benchmarks/scale.md says it beside the figures):

* Base: the first ``base_documents`` records with text of a BEIR-layout corpus, built by the
  build job with the real encoders (not timed).
* Growth: grown document ``k`` is base document ``k mod B`` with `` [copy c]`` (``c = k div B``)
  added to its title. Its text, so its chunks, are the base document's; the title makes each
  chunk's embedding text, so its cache key, its own. Every tenth grown document goes to a second
  source, which is its own tenant: a tenant filter keeps 10 % of the chunks.
* Vectors: a grown chunk's dense vector is its base chunk's real vector blended with another
  base chunk's, drawn at random (weight drawn uniformly below ``BLEND``), plus seeded Gaussian
  noise of norm about ``NOISE``, renormalised: the copies of one base chunk spread towards
  different neighbours instead of forming one cluster of near-ties. Its SPLADE vector is the
  base chunk's. Both are written into the embedding cache before the timed build, where a nightly
  re-run finds the vectors of unchanged text, so the build encodes nothing.
* Queries: titles of base documents, encoded by the real query encoder.
* The vocabulary's term vectors are copied from the base build's cache (the copies' words are the
  base's, plus the copy marks), as a re-run finds them.

Each build and the serving measurement run in a fresh process, so that peak RSS is theirs alone.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from dagster import AssetSelection

from retrieval_assets.bench.builds import BenchmarkError, sealed
from retrieval_assets.bench.latency import latency_by_configuration
from retrieval_assets.bench.report import emit_figures, peak_rss_mb, scratch_dir
from retrieval_assets.core.embed.steps import embedding_cache
from retrieval_assets.core.embed.vectors import dense_matrix, dense_values, l2_normalise
from retrieval_assets.core.evaluation.metrics import latency_percentiles
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.ingest.catalog import catalog_file, read_raw_rows
from retrieval_assets.core.io.parted import table_path
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import parse_filters
from retrieval_assets.defs.resources import CatalogResource, DenseIndexConfig, IndexBuildResource, ModelResource
from retrieval_assets.runs import build_index, deployment_resources, materialized, run_selection

BLEND = 0.5
NOISE = 0.25
COPY_MARK = "~"  # grown document id: base id, COPY_MARK, copy number
TENANT_SOURCE = "scale_tenant"  # the second source's folder, so its tenant's name
TENANT_EVERY = 10
SEED_SEGMENT_ROWS = 100_000
TOP_K = 10


def bench_scale(
    dataset: Path,
    chunks: int,
    base_documents: int,
    queries: int,
    approximate_from_chunks: int | None,
    requested_workdir: str | None,
    json_out: str | None,
) -> int:
    """Build, serve and change a grown version; the last stdout line is the JSON figures."""
    catalog_file(dataset, "beir")  # a missing corpus is reported before anything loads
    with scratch_dir(requested_workdir, "retrieval-scale-") as workdir:
        figures = run_scale_benchmark(dataset, chunks, workdir, base_documents, queries, approximate_from_chunks)
    emit_figures(figures, json_out)
    return 0


def run_scale_benchmark(
    dataset: Path,
    target_chunks: int,
    workdir: Path,
    base_documents: int = 2000,
    query_count: int = 200,
    approximate_from_chunks: int | None = None,
) -> dict[str, Any]:
    records = base_records(catalog_file(dataset, "beir"), base_documents)
    build = _build_settings(approximate_from_chunks)
    base = _base_vectors(records, workdir / "base", build)
    grown = workdir / "grown"
    main, tenant = grown / "main", grown / TENANT_SOURCE
    documents = grow(records, base.chunks_per_document, target_chunks, main, tenant)
    catalog = {**_beir(main), "extra_sources": [str(tenant)]}
    home = workdir / "home"
    seeded = seed_cache(home, discover_chunks(workdir / "discover", catalog, build), base)
    # The copies' words are the base's: its vocabulary terms are cached as a re-run finds them.
    shutil.copytree(workdir / "base" / "home" / "embedding_cache" / "terms", home / "embedding_cache" / "terms")

    full = _in_child(timed_build, str(home), catalog, build)
    versions = IndexVersions(home / "indexes")
    versions.promote(versions.version(full["version"]), reason="bench-scale")
    queries = [record["title"] for record in records[:query_count]]
    # Other base titles, searched untimed first, so that no configuration's figures depend on
    # the order they are timed in (the first one used to find every index's pages on disk).
    warmup = [record["title"] for record in records[query_count : 2 * query_count]]
    # The build's gigabytes reach the disk first: timed while the kernel wrote them back, a 1M
    # version's dense P95 was 34.31 ms, against 16.53 ms from the same serve() after a sync.
    os.sync()
    serving = _in_child(serve, str(home), full["version"], queries, warmup, full["tables"])

    change_titles(main / "corpus.jsonl", {documents[1]}, round_=1)
    one_document = _in_child(timed_build, str(home), catalog, build)
    versions.promote(versions.version(one_document["version"]), reason="bench-scale")

    # 1 % of the documents, spread over the catalog (all in the main source); their new text's
    # vectors are seeded as the grown ones were, so only the delta's own work is timed.
    changed = change_titles(main / "corpus.jsonl", set(documents[7::100]), round_=2)
    only_changed = workdir / "changed"
    _write_jsonl(only_changed / "corpus.jsonl", changed)
    seed_cache(home, discover_chunks(workdir / "discover_changed", _beir(only_changed), build), base)
    one_percent = _in_child(timed_build, str(home), catalog, build)
    return {
        "dataset": dataset.name,
        "base_documents": len(records),
        "base_chunks": len(base.chunks),
        "documents": len(documents),
        "chunks": full["chunks"],
        "seeded_chunks": seeded,
        "dense_index": full["dense_index"],
        "build_seconds": full["seconds"],
        "build_peak_rss_mb": full["peak_rss_mb"],
        "build_encoded": full["encoded"],
        "build_stages": full["stages"],
        **serving,
        "one_document_seconds": one_document["seconds"],
        "one_document_mode": one_document["mode"],
        "one_document_encoded": one_document["encoded"],
        "delta_one_percent_documents": len(changed),
        "delta_one_percent_seconds": one_percent["seconds"],
        "delta_one_percent_mode": one_percent["mode"],
        "delta_one_percent_ratio": round(one_percent["seconds"] / full["seconds"], 4),
        "delta_one_percent_encoded": one_percent["encoded"],
        "method": {
            "growth": "base document k mod B, ' [copy c]' added to its title; every tenth in a second tenant",
            "dense": f"base chunk's real vector + U(0, {BLEND}) x a random base chunk's + Gaussian noise of norm "
            f"~{NOISE}, renormalised",
            "sparse": "base chunk's real SPLADE vector",
            "queries": "titles of base documents, real query encoder; as many other base titles searched untimed first",
        },
    }


def base_records(corpus: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` records of a BEIR corpus that have text (ACL papers without an abstract do not)."""
    records = []
    for row in read_raw_rows(corpus):
        record = json.loads(row.raw)
        if str(record.get("text") or "").strip() and str(record.get("title") or "").strip():
            records.append(record)
            if len(records) == limit:
                break
    if not records:
        raise BenchmarkError(f"{corpus} holds no record with a title and text")
    return records


class BaseVectors:
    """The base build's chunks (document id, ordinal) with their real dense and SPLADE vectors."""

    def __init__(self, chunks: pd.DataFrame, dense: np.ndarray, sparse: pd.DataFrame) -> None:
        self.chunks = chunks.reset_index(drop=True)
        self.dense = dense
        self.sparse = sparse.reset_index(drop=True)
        self.row_of = pd.Series(range(len(chunks)), index=pd.MultiIndex.from_frame(chunks[["doc_id", "ordinal"]]))
        self.chunks_per_document: dict[str, int] = chunks.groupby("doc_id").size().to_dict()


def _base_vectors(records: Sequence[dict[str, Any]], workdir: Path, build: dict[str, Any]) -> BaseVectors:
    corpus = workdir / "corpus"
    _write_jsonl(corpus / "corpus.jsonl", records)
    resources = _resources(workdir / "home", _beir(corpus), build)
    outcome = sealed(build_index(resources))
    chunk_table = table_path(Path(materialized(outcome.run, "chunks")["path"]))
    chunks = chunk_table.read_pandas(["chunk_id", "doc_id", "ordinal"])
    dense, sparse = (
        table_path(Path(materialized(outcome.run, name)["path"])).read_pandas()
        for name in ("dense_embeddings", "sparse_embeddings")
    )
    sparse = sparse.set_index("chunk_id")
    ids = chunks["chunk_id"].tolist()
    return BaseVectors(chunks, dense_matrix(dense, ids), sparse.loc[ids, ["indices", "values"]])


def grow(
    records: Sequence[dict[str, Any]], chunks_per_document: dict[str, int], target: int, main: Path, tenant: Path
) -> list[str]:
    """Write grown documents until they hold ``target`` chunks; returns their ids in order."""
    written: list[str] = []
    chunks = 0
    main.mkdir(parents=True, exist_ok=True)
    tenant.mkdir(parents=True, exist_ok=True)
    with (main / "corpus.jsonl").open("w") as main_out, (tenant / "corpus.jsonl").open("w") as tenant_out:
        while chunks < target:
            copy, record = divmod(len(written), len(records))
            base = records[record]
            grown = {**base, "_id": f"{base['_id']}{COPY_MARK}{copy}", "title": f"{base['title']} [copy {copy}]"}
            out = tenant_out if len(written) % TENANT_EVERY == 0 else main_out
            out.write(json.dumps(grown) + "\n")
            written.append(grown["_id"])
            chunks += chunks_per_document.get(str(base["_id"]), 0)
            if len(written) == len(records) and not chunks:
                raise BenchmarkError("the base build made no chunks of its documents")
    return written


def discover_chunks(workdir: Path, catalog: dict[str, Any], build: dict[str, Any]) -> pd.DataFrame:
    """The chunks (document, ordinal, cache key) the product's own ingestion makes of a catalog,
    in a scratch home (so the timed build's chunk memo stays cold)."""
    selection = AssetSelection.assets("chunks").upstream().required_multi_asset_neighbors()
    run = run_selection(selection, _resources(workdir, catalog, build))
    path = materialized(run, "chunks").get("path")
    if not run.success or path is None:
        raise BenchmarkError(f"ingesting the grown catalog failed (run {run.run_id}); see its log above")
    return table_path(Path(path)).read_pandas(["doc_id", "ordinal", "content_hash"])


def seed_cache(home: Path, chunks: pd.DataFrame, base: BaseVectors) -> int:
    """Write the grown chunks' vectors, derived from their base chunks', into ``home``'s embedding cache."""
    models = ModelResource()
    dense_cache = embedding_cache(home / "embedding_cache", "dense", models.dense_encoder())
    sparse_cache = embedding_cache(home / "embedding_cache", "sparse", models.sparse_encoder())
    chunks = chunks.drop_duplicates("content_hash")
    source_ids = chunks["doc_id"].str.rsplit(COPY_MARK, n=1).str[0]
    rows = base.row_of.reindex(pd.MultiIndex.from_arrays([source_ids, chunks["ordinal"]])).to_numpy()
    if np.isnan(rows.astype(float)).any():
        missing = chunks["doc_id"][np.isnan(rows.astype(float))].head(3).tolist()
        raise BenchmarkError(f"grown chunks without a base chunk (the copy was cut differently): {missing}")
    rows = rows.astype(np.int64)
    rng = np.random.default_rng(0)
    dim = base.dense.shape[1]
    for start in range(0, len(chunks), SEED_SEGMENT_ROWS):
        part = slice(start, start + SEED_SEGMENT_ROWS)
        keys = pd.Series(chunks["content_hash"].to_numpy()[part], dtype="string")
        sources = rows[part]
        partners = rng.integers(0, len(base.dense), len(sources))
        weights = rng.uniform(0, BLEND, (len(sources), 1)).astype(np.float32)
        noise = rng.standard_normal((len(sources), dim), dtype=np.float32) * (NOISE / np.sqrt(dim))
        dense = dense_values(l2_normalise(base.dense[sources] + weights * base.dense[partners] + noise))
        dense.insert(0, "content_hash", keys)
        dense_cache.append(dense)
        sparse = base.sparse.iloc[sources].reset_index(drop=True)
        sparse.insert(0, "content_hash", keys)
        sparse_cache.append(sparse)
    return len(chunks)


def change_titles(corpus: Path, ids: set[str], round_: int) -> list[dict[str, Any]]:
    """Revise the titles of the documents ``ids`` in place; returns the revised records."""
    changed = []
    lines = corpus.read_text().splitlines()
    with corpus.open("w") as out:
        for line in lines:
            record = json.loads(line)
            if record["_id"] in ids:
                record["title"] += f" (revised {round_})"
                changed.append(record)
            out.write(json.dumps(record) + "\n")
    return changed


def timed_build(home: str, catalog: dict[str, Any], build: dict[str, Any]) -> dict[str, Any]:
    """One build run of the product's job in this (fresh) process, timed from reading the catalog
    to a sealed version; its peak RSS is this process's."""
    resources = _resources(Path(home), catalog, build)
    # Loaded before the clock, as a long-lived process holds them.
    resources["models"].dense_encoder(), resources["models"].sparse_encoder()
    started = time.perf_counter()
    outcome = sealed(build_index(resources))
    seconds = time.perf_counter() - started
    return {
        "version": outcome.candidate.version,
        "mode": outcome.candidate.mode,
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "chunks": outcome.chunks,
        "encoded": outcome.encoded,
        "stages": outcome.step_seconds,
        "dense_index": materialized(outcome.run, "faiss_index").get("index_type"),
        "tables": {
            name: materialized(outcome.run, name)["path"] for name in ("chunks", "dense_embeddings")
        },
    }


def serve(
    home: str, version_id: str, queries: Sequence[str], warmup: Sequence[str], tables: dict[str, str]
) -> dict[str, Any]:
    """Open the version as a serving process does, search ``warmup`` untimed (every strategy)
    and time ``queries`` one at a time per configuration; then recall@10 of its dense search
    against exact search, unfiltered and with the grown tenant's filter."""
    layout = IndexVersions(Path(home) / "indexes").version(version_id).layout
    models = ModelResource()
    dense_encoder = models.dense_encoder()
    retriever = open_retriever(
        layout, dense_encoder=dense_encoder, sparse_encoder=models.sparse_encoder(), settings=RetrievalSettings()
    )
    try:
        for query in [queries[0], *warmup]:  # first-search costs (encoders, pages on disk) untimed
            retriever.search(query, top_k=TOP_K)
        gc.collect()
        gc.freeze()
        runs = latency_by_configuration(retriever, queries)
        serving_rss = peak_rss_mb()
    finally:
        retriever.close()
    return {
        "serving_rss_mb": round(serving_rss, 1),
        "warmup_queries": len(warmup),
        "latency": runs,
        "dense_p50_ms": runs["dense"]["p50_ms"],
        "dense_p95_ms": runs["dense"]["p95_ms"],
        "hybrid_p95_ms": runs["hybrid"]["p95_ms"],
        **dense_recall(layout.faiss, dense_encoder.encode_queries(list(queries)), tables),
    }


def dense_recall(faiss_path: Path, query_vectors: np.ndarray, tables: dict[str, str]) -> dict[str, Any]:
    """recall@10 of the version's FAISS search against an exact scan of the same vectors."""
    chunks = table_path(Path(tables["chunks"])).read_pandas(["chunk_id", "tenant_id"])
    ids = chunks["chunk_id"].to_numpy()
    matrix = dense_matrix(table_path(Path(tables["dense_embeddings"])).read_pandas(), ids.tolist())
    in_tenant = (chunks["tenant_id"] == TENANT_SOURCE).to_numpy()
    store = FaissDenseStore.open(faiss_path)
    tenant_filter = parse_filters({"tenant_id": TENANT_SOURCE})
    recalls: dict[str, list[float]] = {"all": [], "tenant": []}
    filtered_ms = []
    for vector in query_vectors:
        scores = matrix @ vector
        exact = set(ids[np.argsort(-scores)[:TOP_K]])
        recalls["all"].append(len(exact & {h.chunk_id for h in store.search_dense(vector, TOP_K)}) / TOP_K)
        tenant_scores = np.where(in_tenant, scores, -np.inf)
        exact_tenant = set(ids[np.argsort(-tenant_scores)[:TOP_K]])
        started = time.perf_counter()
        found = store.search_dense(vector, TOP_K, filters=tenant_filter)
        filtered_ms.append((time.perf_counter() - started) * 1000)
        recalls["tenant"].append(len(exact_tenant & {h.chunk_id for h in found}) / TOP_K)
    return {
        "recall_at_10": round(float(np.mean(recalls["all"])), 4),
        "recall_at_10_filtered": round(float(np.mean(recalls["tenant"])), 4),
        "filtered_share": round(float(in_tenant.mean()), 4),
        "dense_search_filtered_p95_ms": round(latency_percentiles(filtered_ms)["p95_ms"], 2),
    }


def _beir(path: Path) -> dict[str, Any]:
    return {"format": "beir", "path": str(path)}


def _build_settings(approximate_from_chunks: int | None) -> dict[str, Any]:
    return {} if approximate_from_chunks is None else {"approximate_from_chunks": approximate_from_chunks}


def _resources(home: Path, catalog: dict[str, Any], build: dict[str, Any]) -> dict[str, Any]:
    return deployment_resources(
        home,
        CatalogResource(**catalog),
        build=IndexBuildResource(dense_index=DenseIndexConfig(**build)),
    )


def _in_child(function: Any, *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        result: dict[str, Any] = pool.submit(function, *args).result()
    return result


def _write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
