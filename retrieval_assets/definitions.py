"""The code location: every definition under ``retrieval_assets/defs``, loaded once, with the
settings every asset shares applied here: owners, code references, code versions and freshness.

``dg dev``, ``dagster dev -w workspace.yaml`` and ``make dev`` all load this module, under the
code location name ``retrieval_assets``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BetaWarning,
    Definitions,
    FreshnessPolicy,
    PreviewWarning,
    SourceAsset,
    build_resources,
    load_from_defs_folder,
    with_source_code_references,
)

from retrieval_assets.defs.code_versions import asset_function, code_version
from retrieval_assets.defs.resources import IndexStorageResource, SearchResource
from retrieval_assets.paths import PROJECT_ROOT

# Who the Dagster UI names as the owner of every asset.
OWNERS = ["team:search"]
# Nightly builds: warn when an index misses one night, fail when it misses two.
NIGHTLY_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(hours=50), warn_window=timedelta(hours=26))
# What every nightly build materializes. Not promoted_index: it materializes only when a
# candidate passes the gate, so a quiet night (nothing changed, or a candidate refused) would
# show it stale although nothing is wrong; index_version stands for it.
NIGHTLY_REFRESHED = {
    AssetKey(name)
    for name in (
        "knowledge_graph", "faiss_index", "qdrant_edge_index", "tantivy_index", "server_indexes", "index_version"
    )
}


def with_shared_asset_settings(loaded: Definitions) -> Definitions:
    """``loaded`` with every asset owned by ``OWNERS``, linked to its source file and line,
    versioned by the hash of its code (``defs.code_versions``), and, where a nightly build
    refreshes it, held to ``NIGHTLY_FRESHNESS``."""
    assets = [asset for asset in loaded.assets or [] if isinstance(asset, AssetsDefinition)]
    versions = {key: code_version(asset_function(asset)) for asset in assets for key in asset.keys}
    with warnings.catch_warnings():
        # Code references and spec mapping are beta / preview APIs, used knowingly.
        warnings.simplefilter("ignore", BetaWarning)
        warnings.simplefilter("ignore", PreviewWarning)
        referenced = with_source_code_references(assets)
        metadata = {
            spec.key: spec.metadata
            for asset in referenced
            if isinstance(asset, AssetsDefinition)
            for spec in asset.specs
        }

        def shared(spec: AssetSpec) -> AssetSpec:
            return spec.replace_attributes(
                owners=OWNERS,
                code_version=versions.get(spec.key, spec.code_version),
                metadata=metadata.get(spec.key, spec.metadata),
                freshness_policy=NIGHTLY_FRESHNESS if spec.key in NIGHTLY_REFRESHED else spec.freshness_policy,
            )

        return loaded.map_asset_specs(func=shared)


def materializable_assets(definitions: Definitions) -> list[AssetsDefinition | AssetSpec | SourceAsset]:
    """``definitions``' assets, as ``materialize`` takes them: the code location has no cacheable ones."""
    assets: list[AssetsDefinition | AssetSpec | SourceAsset] = []
    for asset in definitions.assets or []:
        if not isinstance(asset, AssetsDefinition | AssetSpec | SourceAsset):
            raise TypeError(f"{asset!r} is not an asset materialize() runs")
        assets.append(asset)
    return assets


def code_location_resource(key: str) -> Any:
    """The code location's resource ``key`` as ``defs`` holds it (EnvVar fields unresolved)."""
    if defs.resources is None:
        raise RuntimeError("the code location's Definitions hold no resources")
    return defs.resources[key]


defs = with_shared_asset_settings(load_from_defs_folder(path_within_project=PROJECT_ROOT))
ASSETS = materializable_assets(defs)


@contextmanager
def configured_storage() -> Iterator[IndexStorageResource]:
    """The code location's storage resource with its EnvVar fields (servers, secrets) resolved."""
    with build_resources({"storage": code_location_resource("storage")}) as built:
        yield built.storage


@contextmanager
def configured_search() -> Iterator[SearchResource]:
    """The code location's search resource with its EnvVar fields resolved, as a run sees it
    (read straight from ``defs.resources`` they hold the variables' names, not their values)."""
    with build_resources({"search": code_location_resource("search")}) as built:
        yield built.search
