"""The production compose file, checked without Docker: valid against the Compose
specification's JSON schema (a copy in ``retrieval_assets_tests/specs``), and every volume that
OpenSearch writes to is writable by the uid it runs as (1000).

A named volume takes the ownership of the image directory it is first mounted over; a path the
image does not have is created by Docker owned by root. So each writable OpenSearch mount must
be either a directory the image ships owned by 1000, or a volume that a one-shot service (which
OpenSearch waits for) ``chown``s to 1000 before OpenSearch starts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker" / "compose.yaml"
SCHEMA = ROOT / "retrieval_assets_tests" / "specs" / "compose-spec.json"
OPENSEARCH_UID = 1000
# Directories opensearchproject/opensearch creates owned by opensearch (1000:1000).
IMAGE_DIRS_OWNED_BY_OPENSEARCH = {"/usr/share/opensearch/data", "/usr/share/opensearch/logs"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) for each of a service's volumes (short or long syntax)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            mounts.append((source, target, "ro" in (mode[0].split(",") if mode else [])))
        else:
            mounts.append((volume.get("source", ""), volume["target"], bool(volume.get("read_only"))))
    return mounts


def test_compose_file_is_valid_against_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_check_rejects_a_broken_compose_file(compose):
    schema = json.loads(SCHEMA.read_text())
    broken = {**compose, "services": {**compose["services"], "qdrant": {**compose["services"]["qdrant"], "ports": 6333}}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
    broken = {**compose, "services": {**compose["services"], "postgres": {**compose["services"]["postgres"], "imagee": "x"}}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def _chowned_by_init(compose: dict, service_name: str, volume: str) -> list[str]:
    """The one-shot services that ``service_name`` waits for and that chown ``volume`` to 1000."""
    found = []
    depends = compose["services"][service_name].get("depends_on", {})
    for name, condition in (depends.items() if isinstance(depends, dict) else []):
        if condition.get("condition") != "service_completed_successfully":
            continue
        init = compose["services"][name]
        command = init.get("command", "")
        command = " ".join(command) if isinstance(command, list) else command
        for source, target, read_only in _mounts(init):
            chown = re.compile(rf"chown\s+(-R\s+)?{OPENSEARCH_UID}:{OPENSEARCH_UID}\s+[^;&|]*{re.escape(target)}\b")
            if source == volume and not read_only and chown.search(command) and str(init.get("user", "0")) in ("0", "root"):
                found.append(name)
    return found


def _one_shots(compose: dict) -> set[str]:
    """Services another service waits to complete (setup steps, not servers)."""
    return {
        name
        for service in compose["services"].values()
        for name, condition in (service.get("depends_on") or {}).items()
        if isinstance(condition, dict) and condition.get("condition") == "service_completed_successfully"
    }


def test_every_volume_opensearch_writes_is_writable_by_its_uid(compose):
    unwritable = []
    one_shots = _one_shots(compose)
    servers = [n for n, s in compose["services"].items()
               if str(s.get("image", "")).startswith("opensearchproject/opensearch") and n not in one_shots]
    assert servers == ["opensearch"]
    for name in servers:
        service = compose["services"][name]
        for source, target, read_only in _mounts(service):
            if read_only:
                continue
            named = source in (compose.get("volumes") or {})
            if not named:
                unwritable.append(f"{name}: bind mount {source} -> {target} (ownership comes from the host)")
            elif target not in IMAGE_DIRS_OWNED_BY_OPENSEARCH and not _chowned_by_init(compose, name, source):
                unwritable.append(f"{name}: volume {source} at {target} would be created owned by root")
    assert unwritable == []
