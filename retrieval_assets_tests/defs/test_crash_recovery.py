"""A build killed at each of its phases (SIGKILL at a deterministic fault point, no timing)
leaves serving untouched, and re-running it converges on the version and answers an
uninterrupted build of the same catalog gives."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retrieval_assets.core.faults import FAULT_ENV, FAULT_POINTS
from retrieval_assets.core.index.build import backend_chunk_ids
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource
from retrieval_assets.runs import deployment_resources, evaluate_version
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.defs.test_incremental_build import _answers, _tools, _variants, _write
from retrieval_assets_tests.forked import Zygote

# One encoder block of 2 texts per durable cache segment, so "encode" dies with work saved.
SMALL_BLOCKS = IndexBuildResource(embedding_block_rows=2)

# The nightly flow in a child process (forked by the zygote fixture): build, then evaluate and
# promote the candidate it sealed. Only the default configuration (the one the gate judges) is
# evaluated: all of them (rerank on every gold query) cost ~80 s a build and are not what a crash
# can break.
_CHILD = """
import sys
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource
from retrieval_assets.runs import build_index, deployment_resources, evaluate_version
resources = deployment_resources(
    sys.argv[1], CatalogResource(format="tool_catalog", path=sys.argv[2]),
    build=IndexBuildResource(embedding_block_rows=2),
)
built = build_index(resources)
evaluate_version(resources, built.candidate.version, configurations=[])
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, encoders) -> tuple[Path, IndexVersion, dict]:
    """The changed catalog, and the version and answers of an uninterrupted build of it."""
    root = tmp_path_factory.mktemp("reference")
    tools = _tools()
    catalog = _write(root / "changed.jsonl", tools + _variants(tools, 2))
    _, version = build_catalog(root / "home", catalog, build=SMALL_BLOCKS)
    return catalog, version, _answers(version.layout, encoders)


@pytest.fixture(scope="module")
def served_home(tmp_path_factory: pytest.TempPathFactory, encoders) -> tuple[Path, IndexVersion, dict]:
    """A home serving a promoted version of the original catalog, built once and copied per test."""
    root = tmp_path_factory.mktemp("served")
    _, served = build_catalog(root / "home", _write(root / "served.jsonl", _tools()), build=SMALL_BLOCKS)
    IndexVersions(root / "home" / "indexes").promote(served, reason="test")
    return root / "home", served, _answers(served.layout, encoders)


@pytest.fixture(scope="module")
def encoders():
    from retrieval_assets.defs.resources import ModelResource

    models = ModelResource()
    return models.dense_encoder(), models.sparse_encoder()


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_build_killed_at_each_phase_converges_and_serving_never_moves(
    point: str, tmp_path: Path, reference, served_home, encoders, zygote: Zygote
) -> None:
    catalog, expected, expected_answers = reference
    original, served, answers = served_home
    home = tmp_path / "home"
    shutil.copytree(original, home)
    versions = IndexVersions(home / "indexes")
    pointer = (home / "indexes" / "promoted.json").read_bytes()

    child = zygote.run(_CHILD, str(home), str(catalog), env={FAULT_ENV: point})
    assert child.returncode == -9, f"not killed at {point}: exit {child.returncode}\n{child.output[-3000:]}"

    # Killed: nothing new is sealed unless the kill came after sealing, and serving never moved.
    sealed = [v.id for v in versions.sealed()]
    assert sealed == ([served.id, expected.id] if point == "promote" else [served.id])
    assert (home / "indexes" / "promoted.json").read_bytes() == pointer
    assert _answers(versions.promoted().layout, encoders) == answers

    resources = deployment_resources(
        home, CatalogResource(format="tool_catalog", path=str(catalog)), build=SMALL_BLOCKS
    )
    resumed, resumed_version = build_catalog(home, catalog, build=SMALL_BLOCKS)
    assert resumed_version.id == expected.id
    assert backend_chunk_ids(resumed_version) == backend_chunk_ids(expected)
    assert _answers(resumed_version.layout, encoders) == expected_answers
    assert evaluate_version(resources, resumed_version.id, configurations=[]).success
    assert versions.promoted().id == expected.id
