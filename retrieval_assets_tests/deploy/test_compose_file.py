"""The production compose file, checked without Docker: valid against the Compose
specification's JSON schema (a copy in ``retrieval_assets_tests/specs``), every volume that
OpenSearch writes to is writable by the uid it runs as (1000), the HTTP API (`api`) serves with
required keys on the daemon's index volume, and nothing but the API is published beyond loopback.

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

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
SCHEMA = ROOT / "retrieval_assets_tests" / "specs" / "compose-spec.json"
OPENSEARCH_UID = 1000
# Directories opensearchproject/opensearch creates owned by opensearch (1000:1000).
IMAGE_DIRS_OWNED_BY_OPENSEARCH = {
    "/usr/share/opensearch/data",
    "/usr/share/opensearch/logs",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) for each of a service's volumes (short or long syntax)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            mounts.append(
                (source, target, "ro" in (mode[0].split(",") if mode else []))
            )
        else:
            mounts.append(
                (
                    volume.get("source", ""),
                    volume["target"],
                    bool(volume.get("read_only")),
                )
            )
    return mounts


def test_compose_file_is_valid_against_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(compose)
    ]
    assert errors == []


def test_the_schema_check_rejects_a_broken_compose_file(compose):
    schema = json.loads(SCHEMA.read_text())
    broken = {
        **compose,
        "services": {
            **compose["services"],
            "qdrant": {**compose["services"]["qdrant"], "ports": 6333},
        },
    }
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
    broken = {
        **compose,
        "services": {
            **compose["services"],
            "postgres": {**compose["services"]["postgres"], "imagee": "x"},
        },
    }
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def _chowned_by_init(compose: dict, service_name: str, volume: str) -> list[str]:
    """The one-shot services that ``service_name`` waits for and that chown ``volume`` to 1000."""
    found = []
    depends = compose["services"][service_name].get("depends_on", {})
    for name, condition in depends.items() if isinstance(depends, dict) else []:
        if condition.get("condition") != "service_completed_successfully":
            continue
        init = compose["services"][name]
        command = init.get("command", "")
        command = " ".join(command) if isinstance(command, list) else command
        for source, target, read_only in _mounts(init):
            chown = re.compile(
                rf"chown\s+(-R\s+)?{OPENSEARCH_UID}:{OPENSEARCH_UID}\s+[^;&|]*{re.escape(target)}\b"
            )
            if (
                source == volume
                and not read_only
                and chown.search(command)
                and str(init.get("user", "0")) in ("0", "root")
            ):
                found.append(name)
    return found


def _one_shots(compose: dict) -> set[str]:
    """Services another service waits to complete (setup steps, not servers)."""
    return {
        name
        for service in compose["services"].values()
        for name, condition in (service.get("depends_on") or {}).items()
        if isinstance(condition, dict)
        and condition.get("condition") == "service_completed_successfully"
    }


def test_every_volume_opensearch_writes_is_writable_by_its_uid(compose):
    unwritable = []
    one_shots = _one_shots(compose)
    servers = [
        n
        for n, s in compose["services"].items()
        if str(s.get("image", "")).startswith("opensearchproject/opensearch")
        and n not in one_shots
    ]
    assert servers == ["opensearch"]
    for name in servers:
        service = compose["services"][name]
        for source, target, read_only in _mounts(service):
            if read_only:
                continue
            named = source in (compose.get("volumes") or {})
            if not named:
                unwritable.append(
                    f"{name}: bind mount {source} -> {target} (ownership comes from the host)"
                )
            elif target not in IMAGE_DIRS_OWNED_BY_OPENSEARCH and not _chowned_by_init(
                compose, name, source
            ):
                unwritable.append(
                    f"{name}: volume {source} at {target} would be created owned by root"
                )
    assert unwritable == []


# --- The HTTP API service, its keys, and who is reachable from other hosts ---------------------

LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}


def _command(service: dict) -> list[str]:
    command = service.get("command", [])
    return (
        command.split() if isinstance(command, str) else [str(part) for part in command]
    )


def _published(service: dict) -> list[tuple[str, str]]:
    """(host_ip, container_port) for each published port; host_ip "" means every interface."""
    published = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            published.append((str(port.get("host_ip", "")), str(port["target"])))
        else:
            parts = str(port).rsplit(":", 2)
            published.append(
                (parts[0] if len(parts) == 3 else "", parts[-1].split("/")[0])
            )
    return published


def test_the_api_service_serves_on_every_interface_and_requires_keys(compose):
    api = compose["services"].get("api")
    assert api is not None, "compose.yaml has no `api` service"
    command = _command(api)
    assert command[:2] == ["retrieval-assets", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert ("", port) in _published(api)
    # `:?` makes compose refuse to start without keys, like the other secrets (never a default).
    assert re.fullmatch(
        r"\$\{RETRIEVAL_ASSETS_API_KEYS:\?[^}]+\}",
        api["environment"]["RETRIEVAL_ASSETS_API_KEYS"],
    )
    assert not {"RETRIEVAL_ASSETS_API_KEYS_FILE"} & set(api["environment"])


def test_the_api_reads_and_writes_the_index_volume_the_daemon_uses(compose):
    api, daemon = compose["services"]["api"], compose["services"]["dagster-daemon"]
    home = daemon["environment"]["RETRIEVAL_ASSETS_HOME"]
    assert api["environment"]["RETRIEVAL_ASSETS_HOME"] == home
    daemon_home = [
        (source, read_only)
        for source, target, read_only in _mounts(daemon)
        if target == home
    ]
    api_home = [
        (source, read_only)
        for source, target, read_only in _mounts(api)
        if target == home
    ]
    assert daemon_home == [("indexes", False)]
    # Posted documents land in $RETRIEVAL_ASSETS_HOME/inbox/, which the daemon's sensor reads.
    assert api_home == daemon_home


def test_the_api_queries_the_servers_the_dagster_services_build(compose):
    api, daemon = compose["services"]["api"], compose["services"]["dagster-daemon"]
    stores = {
        k: v for k, v in daemon["environment"].items() if not k.startswith("DAGSTER_")
    }
    assert {"QDRANT_URL", "OPENSEARCH_URL", "QDRANT_CA_CERTS"} <= set(stores)
    assert {k: api["environment"].get(k) for k in stores} == stores
    certs = {
        (source, target) for source, target, _ in _mounts(daemon) if source == "certs"
    }
    assert certs and certs <= {(source, target) for source, target, _ in _mounts(api)}
    waits_for = {
        name: c
        for name, c in daemon["depends_on"].items()
        if name not in ("postgres", "redis")  # Dagster's storage and broker: not the API's
    }
    assert {name: api["depends_on"].get(name) for name in waits_for} == waits_for


def test_the_api_healthcheck_needs_no_curl_and_counts_any_health_answer(compose):
    """The image (python:3.11-slim) has no curl. /health answers 503 until a version is promoted:
    the server is up then, so the check passes on 200 and 503 and fails on no answer or a 500."""
    import http.server
    import socket
    import subprocess
    import sys
    import threading

    test = compose["services"]["api"]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python" and test[2] == "-c", test
    assert not any("curl" in part for part in test)
    code = test[3]
    assert "http://127.0.0.1:8000/health" in code

    def check(port: int) -> int:
        script = code.replace("127.0.0.1:8000/", f"127.0.0.1:{port}/")
        return subprocess.run(
            [sys.executable, "-c", script], check=False, capture_output=True, timeout=30
        ).returncode

    for status, healthy in ((200, True), (503, True), (500, False)):

        class Health(http.server.BaseHTTPRequestHandler):
            def do_GET(self, status=status):
                self.send_response(status if self.path == "/health" else 404)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Health)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert (check(server.server_address[1]) == 0) is healthy, status
        finally:
            server.shutdown()
            server.server_close()
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    assert check(free) != 0


def test_the_dagster_webserver_publishes_on_loopback_only(compose):
    published = _published(compose["services"]["dagster-webserver"])
    assert published, "the webserver publishes no port"
    assert all(host in LOOPBACK for host, _ in published), published


def test_only_the_api_is_reachable_from_other_hosts(compose):
    """Dagster has no login, and the stores' credentials (OpenSearch admin, Qdrant's global key)
    bypass the API's tenants and scopes: only the API publishes beyond loopback."""
    exposed = {
        name
        for name, s in compose["services"].items()
        if any(h not in LOOPBACK for h, _ in _published(s))
    }
    assert exposed == {"api"}


def test_every_required_variable_is_listed_in_the_env_example():
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    listed = set(
        re.findall(
            r"^(\w+)=", (COMPOSE.parent / ".env.example").read_text(), re.MULTILINE
        )
    )
    assert "RETRIEVAL_ASSETS_API_KEYS" in required
    assert required <= listed, required - listed


# --- The Celery executor: broker, workers, and the Dagster services' start-up ----------------

DAGSTER_SERVICES = ("dagster-webserver", "dagster-daemon")


def _entrypoint(service: dict) -> str:
    entrypoint = service.get("entrypoint", [])
    return entrypoint if isinstance(entrypoint, str) else " ".join(str(part) for part in entrypoint)


def test_the_broker_is_published_nowhere(compose):
    redis = compose["services"]["redis"]
    assert str(redis["image"]).startswith("redis:")
    assert _published(redis) == [] and "network_mode" not in redis
    assert redis.get("healthcheck"), "the Dagster services wait for a healthy broker"


def test_celery_workers_run_the_executor_app_with_the_dagster_environment(compose):
    # The variable the code location's executor reads (read from its source: importing it loads Dagster).
    executor = (ROOT / "retrieval_assets" / "defs" / "executor.py").read_text()
    [broker_var] = re.findall(r'^BROKER_VAR = "(\w+)"$', executor, re.MULTILINE)
    assert broker_var == "DAGSTER_CELERY_BROKER_URL"
    worker, daemon = compose["services"]["celery-worker"], compose["services"]["dagster-daemon"]
    command = _entrypoint(worker).split()
    assert command[:4] == ["celery", "-A", "retrieval_assets.defs.executor", "worker"], command
    assert "--concurrency=1" in command
    # The same image and Dagster environment (Postgres, stores, broker) and volumes as the daemon's runs.
    assert worker["image"] == daemon["image"] and worker.get("build") == daemon.get("build")
    assert worker["environment"] == daemon["environment"]
    assert sorted(_mounts(worker)) == sorted(_mounts(daemon))
    assert worker["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert worker["depends_on"]["postgres"] == {"condition": "service_healthy"}
    # Scalable: `--scale celery-worker=N` / deploy.replicas need no fixed name and no published port.
    assert "container_name" not in worker and _published(worker) == []
    assert worker["deploy"]["replicas"] >= 1
    for name in (*DAGSTER_SERVICES, "celery-worker"):
        environment = compose["services"][name]["environment"]
        assert environment[broker_var] == "redis://redis:6379/0", name
        assert compose["services"][name]["depends_on"]["redis"] == {"condition": "service_healthy"}


def test_the_dagster_services_migrate_the_storage_then_start(compose):
    starts = {"dagster-webserver": "exec dagster-webserver ", "dagster-daemon": "exec dagster-daemon run "}
    for name, start in starts.items():
        entrypoint = compose["services"][name]["entrypoint"]
        assert entrypoint[:2] == ["sh", "-c"], entrypoint
        script = entrypoint[2]
        assert script.startswith("dagster instance migrate && "), script
        assert start in script and script.index("migrate") < script.index(start), script


def test_the_dagster_services_give_dagster_yaml_every_variable_it_reads(compose):
    read = set(re.findall(r"\{env: (\w+)\}", (COMPOSE.parent / "dagster.yaml").read_text()))
    assert {"DAGSTER_PG_PORT", "DAGSTER_STORAGE_DIR", "DAGSTER_COMPUTE_LOGS_DIR"} <= read
    for name in (*DAGSTER_SERVICES, "celery-worker"):
        environment = compose["services"][name]["environment"]
        assert read <= set(environment), (name, read - set(environment))
        assert environment["DAGSTER_PG_PORT"] == "5432"
        # Step outputs and compute logs on the volume every Dagster service and worker mounts.
        home = environment["RETRIEVAL_ASSETS_HOME"]
        for variable in ("DAGSTER_STORAGE_DIR", "DAGSTER_COMPUTE_LOGS_DIR"):
            assert environment[variable].startswith(home + "/"), (name, variable)
        assert ("indexes", home, False) in _mounts(compose["services"][name])


def test_the_image_installs_the_production_extra():
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    assert "-e '.[production]'" in dockerfile
    assert "dagster-postgres==" not in dockerfile  # pinned in pyproject.toml's extra only
