"""The code location: every definition under ``retrieval_assets/defs``, loaded once.

``dg dev``, ``dagster dev -w workspace.yaml`` and ``make dev`` all load this module, under the
code location name ``retrieval_assets``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import build_resources, load_from_defs_folder

from retrieval_assets.defs.resources import IndexStorageResource, SearchResource
from retrieval_assets.paths import PROJECT_ROOT

defs = load_from_defs_folder(path_within_project=PROJECT_ROOT)
ASSETS = list(defs.assets or [])


@contextmanager
def configured_storage() -> Iterator[IndexStorageResource]:
    """The code location's storage resource with its EnvVar fields (server secrets) resolved."""
    with build_resources({"storage": defs.resources["storage"]}) as built:
        yield built.storage


@contextmanager
def configured_search() -> Iterator[SearchResource]:
    """The code location's search resource with its EnvVar fields resolved, as a run sees it
    (read straight from ``defs.resources`` they hold the variables' names, not their values)."""
    with build_resources({"search": defs.resources["search"]}) as built:
        yield built.search
