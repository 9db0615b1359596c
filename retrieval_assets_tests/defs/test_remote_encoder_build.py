"""The build job with its dense vectors from an OpenAI-compatible embedding endpoint
(``ModelResource.dense_endpoint``), against the real test server
(``retrieval_assets_tests/embedding_server.py``: the packaged all-MiniLM-L6-v2 in its own process
on loopback): the sealed version holds the server's vectors, a server dying mid-build fails the
run at ``dense_embeddings`` naming the endpoint, and the re-run against the restarted server
encodes only what the embedding cache lacked (the core-level counterpart:
``core/embed/test_remote_encoder.py``)."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from retrieval_assets.core.index.layout import read_build_manifest
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.io_manager import stored_value
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource, ModelResource
from retrieval_assets.runs import build_index, deployment_resources, materialized
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.defs.test_incremental_build import _tools, _write
from retrieval_assets_tests.embedding_server import MODEL_NAME, embedding_server
from retrieval_assets_tests.servers import free_port

# One durable cache segment per 8 chunks, sent as requests of 4 texts, one at a time, so the
# request at which the server dies is known.
BLOCKS = IndexBuildResource(embedding_block_rows=8)  # type: ignore[call-arg]  # fields mypy cannot see


def _catalog(path: Path) -> Path:
    """24 tools (one chunk each): the 18 of the test catalog and variants of 6 of them."""
    tools = _tools()
    variants = [
        {**tool, "id": f"{tool['id']}-v", "description": f"{tool['description']} A variant of the tool."}
        for tool in tools[:6]
    ]
    return _write(path, [*tools, *variants])


def _models(base_url: str, **options: object) -> ModelResource:
    # The sparse model stays the packaged default; the dense model is the name the server serves.
    return ModelResource(  # type: ignore[call-arg]  # the ModelSettings fields, which mypy cannot see
        dense_endpoint=base_url,
        dense_model=MODEL_NAME,
        dense_endpoint_batch=4,
        dense_endpoint_concurrency=1,
        **options,  # type: ignore[arg-type]
    )


def test_a_build_with_a_dense_endpoint_seals_the_servers_vectors(tmp_path: Path) -> None:
    home, catalog = tmp_path / "home", _catalog(tmp_path / "catalog.jsonl")
    with embedding_server() as server:
        server.control()
        outcome, version = build_catalog(home, catalog, models=_models(server.base_url), build=BLOCKS)
        seen = server.stats()

    dense = materialized(outcome.run, "dense_embeddings")
    assert outcome.chunks == 24
    assert dense["encoded"] == outcome.encoded["dense"] == 24 and dense["reused_from_cache"] == 0
    assert dense["dim"] == 384 and dense["model"] == MODEL_NAME
    assert dense["encoder_fingerprint"].endswith(f"endpoint={server.base_url}/embeddings")
    assert dense["cache_segments"] == 3  # one per block of 8
    # The server encoded every chunk and vocabulary term, beside the probe that learned the dimension.
    assert seen["texts"] == 1 + 24 + outcome.encoded["vocabulary"] and seen["max_batch"] == 4

    assert version.sealed
    manifest = read_build_manifest(version.layout.faiss)
    assert (manifest["dim"], manifest["count"], manifest["dense_model"]) == (384, 24, MODEL_NAME)
    index = faiss.read_index(str(version.layout.faiss / "index.faiss"))
    assert (index.d, index.ntotal) == (384, 24)
    vectors = np.stack(stored_value(home / "artifacts", "dense_embeddings")["embedding"].to_list())
    assert vectors.shape == (24, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_server_dying_mid_build_fails_the_step_naming_it_and_the_rerun_resumes_from_the_cache(
    tmp_path: Path,
) -> None:
    home, catalog = tmp_path / "home", _catalog(tmp_path / "catalog.jsonl")
    port = free_port()
    # Two attempts a request: a dead server fails the step within a second.
    models = _models(f"http://127.0.0.1:{port}/v1", dense_endpoint_retries=1)
    resources = deployment_resources(
        home, CatalogResource(format="tool_catalog", path=str(catalog)), models, build=BLOCKS
    )

    with embedding_server(port) as dying:
        # The load probe and two blocks (2 requests each) are answered; the server dies on the
        # first request of the third block.
        dying.control(die_after=5)
        failed = build_index(resources)
        assert dying.process.wait(timeout=10) != 0
    endpoint = f"{dying.base_url}/embeddings"

    assert not failed.success and failed.candidate is None
    failures = {event.step_key: event.step_failure_data.error for event in failed.run.get_step_failure_events()}
    # The vocabulary (which embeds its terms with the same encoder) fails on the dead server too;
    # everything downstream of the two is skipped, and nothing is sealed.
    assert set(failures) == {"dense_embeddings", "vocabulary"}
    for step, error in failures.items():
        # Dagster wraps the asset's exception ("Error occurred while executing op ..."): the
        # encoder's error, naming the endpoint, is the step failure's cause.
        assert error is not None and error.cause is not None, step
        assert error.cause.cls_name == "EmbeddingEndpointError", (step, error.cause.message)
        assert f"embedding endpoint {endpoint} failed after 2 attempts" in error.cause.message, error.cause.message
    assert IndexVersions(home / "indexes").sealed() == []

    with embedding_server(port) as again:  # the same URL: the same encoder fingerprint and cache
        again.control()
        resumed = build_index(resources)
        seen = again.stats()

    assert resumed.success and resumed.candidate is not None and resumed.candidate.sealed
    dense = materialized(resumed.run, "dense_embeddings")
    assert (dense["reused_from_cache"], dense["encoded"]) == (16, 8)  # the two blocks written before the death
    assert resumed.encoded["sparse"] == 0  # sparse_embeddings finished in the failed run
    # Only what the caches lacked went to the server: the third block and the vocabulary's terms
    # (no probe: the encoder is loaded once per process, and reconnects to the restarted server).
    assert seen["texts"] == 8 + resumed.encoded["vocabulary"]
    version = IndexVersions(home / "indexes").version(resumed.candidate.version)
    assert read_build_manifest(version.layout.faiss)["dim"] == 384
