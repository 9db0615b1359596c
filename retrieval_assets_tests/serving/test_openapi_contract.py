"""The OpenAPI document is the contract: schemathesis, a client nobody here wrote, reads
``/openapi.json`` from the served app and drives every operation with every check (status codes,
content types and response schemas as documented, schema-valid requests accepted and
schema-violating ones refused, undeclared methods answered 405 with ``Allow``), in all its phases
(examples, coverage, fuzzing, stateful), over the real three-tenant build of ``test_http_api``.

The server has API keys, as in production. The runs send a valid key, and schemathesis's
``ignored_auth`` check also sends each operation without one and with a wrong one. A further run
sends no key at all, and every answer it got (read from its HAR report) must be a 401, but for
``/health``, which stays open.

It runs as ``st run`` against uvicorn on loopback, as an outside client would; the pytest
integration (``@schema.parametrize``) does not work under pytest 9.2 (it sets ``Node._nodeid``).
Bounded (``--max-examples``) and deterministic (``--generation-deterministic``: no example
database either): the same requests on every run and machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from retrieval_assets.bench.auth_overhead import serve_in_thread
from retrieval_assets.serving import create_app
from retrieval_assets.serving.auth import ApiKeys, new_key
from retrieval_assets_tests.core.retrieval.tenant_indexes import TENANTS, build_tenant_indexes

# Test cases per operation and phase: about 30 s of requests on two busy cores.
MAX_EXAMPLES = 60
# An admin key over every tenant, with a rate no run reaches.
TOKEN, KEY = new_key("contract", TENANTS, ["admin"], requests_per_minute=1_000_000)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    build = build_tenant_indexes(tmp_path_factory.getbasetemp() / "tenant_indexes")  # test_http_api's, built once
    assert build.success
    # Posted documents go to a scratch home, never into the build or the repository.
    home = tmp_path_factory.mktemp("contract_home")
    # alpha is the default tenant, so that a write naming none is accepted (and the stateful phase can chain them).
    return create_app(
        build.search_resource().service,
        home=home,
        catalog_format="tool_catalog",
        default_tenant="alpha",
        keys=ApiKeys([KEY]),
    )


@pytest.fixture(scope="module")
def base_url(app: FastAPI) -> Iterator[str]:
    """The app under uvicorn on a free loopback port; its lifespan opens and closes the indexes."""
    with serve_in_thread(app, start_timeout_s=60) as url:
        yield url


# Every path belongs to one run, so a run's failures name its own operations.
RUNS = {"search_and_health": r"^/(search|health|metrics)", "documents": r"^/documents"}
# Known failures by run: (the report's failure headings, schemathesis failure kinds). A run with
# known failures must fail with exactly these, and the test fails once they are fixed: then drop
# the entry. Stateful, POST /documents -> DELETE /documents/{id} -> GET /documents/{id}: the GET
# answers 200 with the queued delete's receipt, where schemathesis wants a deleted resource gone
# (404 or 410).
KNOWN = {"documents": ({"Stateful tests"}, {"ST301 Deleted resource still available"})}


def test_every_path_is_in_a_run(app: FastAPI) -> None:
    assert all(any(re.match(paths, path) for paths in RUNS.values()) for path in app.openapi()["paths"])


def test_every_operation_but_health_declares_the_key(app: FastAPI) -> None:
    openapi = app.openapi()
    assert openapi["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "an API key (`retrieval-assets api-key create`)",
    }
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            secured = path != "/health"
            assert ("security" in operation) == secured, (method, path)
            assert {"401", "403", "429"} <= set(operation["responses"]) or not secured, (method, path)


def _schemathesis(base_url: str, cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", f"{base_url}/openapi.json",
        "--generation-deterministic",  # and no example database
        "--workers", "1",
        "--request-timeout", "60",
        "--no-color",
        *options,
    ]  # fmt: skip
    # cwd: no schemathesis.toml of the repository's is read, and nothing is written into it.
    env = os.environ | {"COLUMNS": "200"}
    return subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=540, env=env)


@pytest.mark.parametrize("name", RUNS)
def test_schemathesis_finds_no_failure(app: FastAPI, base_url: str, tmp_path: Path, name: str) -> None:
    paths = RUNS[name]
    run = _schemathesis(
        base_url,
        tmp_path,
        "--include-path-regex", paths,
        "--checks", "all",  # ignored_auth among them: without a key, and with a wrong one, it must be refused
        "--max-examples", str(MAX_EXAMPLES),
        "--header", f"Authorization: Bearer {TOKEN}",
    )  # fmt: skip
    report = run.stdout + run.stderr
    operations = sum(len(item) for path, item in app.openapi()["paths"].items() if re.match(paths, path))
    tested = re.search(r"Tested: (\d+)", report)
    assert tested and int(tested.group(1)) == operations > 0, report[-30_000:]
    failed = set(re.findall(r"^_{3,} (.+?) _{3,}$", report, re.MULTILINE))
    kinds = set(re.findall(r"❌ (ST\d+ [^:\n]+): \d+$", report, re.MULTILINE))
    if name in KNOWN:
        assert run.returncode != 0, f"the known failures of {name} are fixed: drop them from KNOWN"
        assert (failed, kinds) == KNOWN[name], report[-30_000:]
        pytest.xfail(f"known: {sorted(failed)} {sorted(kinds)}")
    assert run.returncode == 0 and "No issues found" in report, report[-30_000:]


def test_without_a_key_every_operation_answers_401(app: FastAPI, base_url: str, tmp_path: Path) -> None:
    run = _schemathesis(
        base_url,
        tmp_path,
        "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
        "response_schema_conformance",
        "--max-examples", "10",
        "--phases", "examples,coverage,fuzzing",
        "--report", "har",
        "--report-har-path", str(tmp_path / "keyless.har"),
    )  # fmt: skip
    report = run.stdout + run.stderr
    secured = {
        f"{method.upper()} {path}"
        for path, ops in app.openapi()["paths"].items()
        for method in ops
        if path != "/health"
    }
    # Every case passed; schemathesis itself warns that the operations answered only 401.
    assert run.returncode == 0 and re.search(r"(\d+) generated, \1 passed$", report, re.MULTILINE), report[-30_000:]
    assert f"Authentication failed: {len(secured)} operations returned only 401/403" in report, report[-30_000:]
    entries = json.loads((tmp_path / "keyless.har").read_text())["log"]["entries"]
    answered: dict[str, set[int]] = {}
    for entry in entries:
        request = entry["request"]
        path = httpx.URL(request["url"]).path
        route = "/health" if path == "/health" else re.sub(r"^/documents/.+", "/documents/{doc_id}", path)
        answered.setdefault(f"{request['method']} {route}", set()).add(entry["response"]["status"])
    assert secured <= set(answered), sorted(secured - set(answered))  # every operation was tried
    not_refused = {operation: codes for operation, codes in answered.items() if operation in secured and codes != {401}}
    assert not not_refused, not_refused
    assert answered["GET /health"] == {200}
