"""The asset graph as committed: every asset's group, kinds, upstream assets, checks, partitions,
owners, freshness and pools, compared with ``asset_specs.snapshot.json``.

A change of the graph is then a reviewed diff of that file. After an intended change, write the
snapshot again and commit it with the change:

    UPDATE_SNAPSHOTS=1 .venv/bin/pytest retrieval_assets_tests/defs/test_asset_specs.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    StaticPartitionsDefinition,
)

from retrieval_assets.definitions import defs

SNAPSHOT = Path(__file__).with_name("asset_specs.snapshot.json")


def _partitions(partitions_def: PartitionsDefinition | None) -> Any:
    if partitions_def is None:
        return None
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return {dimension.name: _partitions(dimension.partitions_def) for dimension in partitions_def.partitions_defs}
    if isinstance(partitions_def, DynamicPartitionsDefinition):
        return f"dynamic: {partitions_def.name}"
    if isinstance(partitions_def, StaticPartitionsDefinition):
        return partitions_def.get_partition_keys()
    return type(partitions_def).__name__


def asset_specs() -> dict[str, dict[str, Any]]:
    """What the snapshot holds, by asset key: everything but code versions and descriptions,
    which change with the code."""
    graph = defs.resolve_asset_graph()
    specs: dict[str, dict[str, Any]] = {}
    for key in sorted(graph.get_all_asset_keys(), key=AssetKey.to_user_string):
        node = graph.get(key)
        specs[key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "checks": {
                check.name: {"blocking": graph.get(check).blocking}
                for check in sorted(node.check_keys, key=lambda check: check.name)
            },
            "partitions": _partitions(node.partitions_def),
            "owners": list(node.owners),
            "freshness": str(node.freshness_policy) if node.freshness_policy else None,
            "pools": sorted(node.pools or []),
        }
    return specs


def test_asset_specs_match_the_snapshot() -> None:
    current = asset_specs()
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n")
    assert current == json.loads(SNAPSHOT.read_text()), (
        f"the asset graph differs from {SNAPSHOT.name}; if the change is intended, run "
        "UPDATE_SNAPSHOTS=1 .venv/bin/pytest retrieval_assets_tests/defs/test_asset_specs.py and commit the file"
    )
