"""Every ``retrieval-assets`` command as a user runs it: a subprocess with its own
``RETRIEVAL_ASSETS_HOME`` and ``DAGSTER_HOME``.

The code location's catalog resource only has its default path (the bundled scifact_mini), so
``run`` builds that catalog once for the module; ``versions``, ``rollback``, ``search`` and
``serve`` run against a home built in-process from tiny BEIR catalogs beforehand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.resources import CatalogResource, PromotionGateResource
from retrieval_assets.paths import PROJECT_ROOT
from retrieval_assets.runs import deployment_resources, evaluate_version
from retrieval_assets_tests.builds import build_catalog

QUERY = "vitamin B12 deficiency and homocysteine"
# Generous bounds that only stop a hung command; no assertion depends on how fast anything runs.
COMMAND_TIMEOUT_S = 900
SERVE_READY_TIMEOUT_S = 300


def _env(home: Path, dagster_home: Path) -> dict[str, str]:
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    return {
        **os.environ,
        "RETRIEVAL_ASSETS_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retrieval_assets.cli", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def _shrunk_copy(source: Path, target: Path, drop_last_docs: int) -> Path:
    """``source`` (a tiny BEIR directory) without its last few distractors: another catalog,
    hence another candidate version, with the same gold queries."""
    shutil.copytree(source, target)
    lines = (source / "corpus.jsonl").read_text().splitlines()
    docs, broken = lines[:-1], lines[-1]
    (target / "corpus.jsonl").write_text("\n".join([*docs[:-drop_last_docs], broken]) + "\n")
    return target


@pytest.fixture(scope="module")
def tiny_home(tiny_beir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A home where two versions were built and promoted one after the other (first, then second)."""
    root = tmp_path_factory.mktemp("cli_tiny")
    home = root / "home"
    second_catalog = _shrunk_copy(tiny_beir, root / "tiny_beir_b", drop_last_docs=3)
    promoted = []
    for catalog in (tiny_beir, second_catalog):
        outcome, version = build_catalog(home, catalog, catalog_format="beir")
        resources = deployment_resources(home, CatalogResource(format="beir", path=str(catalog)))
        # The default configuration only: the gate judges it, and the commands below read nothing else.
        result = evaluate_version(resources, version.id, configurations=[])
        assert result.success, result.run_id
        current = IndexVersions(home / "indexes").promoted()
        assert current is not None and current.id == version.id, (version.id, current)
        promoted.append(version.id)
    assert promoted[0] != promoted[1]
    return {"home": home, "env": _env(home, root / "dagster_home"), "dagster_home": root / "dagster_home",
            "first": promoted[0], "second": promoted[1]}


@pytest.fixture(scope="module")
def run_home(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``retrieval-assets run`` once on the bundled default catalog (the code location's own)."""
    root = tmp_path_factory.mktemp("cli_run")
    env = _env(root / "home", root / "dagster_home")
    result = cli(env, "run", "--query", QUERY)
    return {"home": root / "home", "env": env, "result": result}


# --- run / versions on the default catalog ---------------------------------------------------


def test_run_builds_evaluates_and_promotes_a_version(run_home):
    result = run_home["result"]
    assert result.returncode == 0, result.stderr[-4000:]
    promoted = IndexVersions(run_home["home"] / "indexes").promoted()
    assert promoted is not None
    assert "Promotion gate: passed" in result.stdout
    assert f"Serving: {promoted.id}" in result.stdout
    assert f"Candidate {promoted.id}" in result.stdout
    # The bundled catalog's 60 gold queries are enough to learn a configuration by 5-fold
    # cross-validation; its held-out estimate is reported beside the named configurations.
    learned = promoted.learned_configuration()
    assert learned is not None and len(learned["folds"]) == 5 and learned["queries"] == 60
    assert "tuned_cv" in promoted.evaluation()["runs"] and "tuned_cv: " in result.stdout
    # The runs were recorded on the instance under DAGSTER_HOME, where `dagster dev` shows them.
    instance = DagsterInstance.from_config(run_home["env"]["DAGSTER_HOME"])
    jobs = {run.job_name for run in instance.get_runs()}
    assert {"index_build_job", "evaluation_job"} <= jobs


def test_versions_lists_the_promoted_version_with_a_star(run_home):
    promoted = IndexVersions(run_home["home"] / "indexes").promoted()
    assert promoted is not None
    result = cli(run_home["env"], "versions")
    assert result.returncode == 0, result.stderr
    starred = [line for line in result.stdout.splitlines() if line.startswith("*")]
    assert len(starred) == 1 and promoted.id in starred[0], result.stdout


# --- search / serve / versions / rollback on a tiny home --------------------------------------


def test_versions_stars_only_the_serving_version(tiny_home):
    result = cli(tiny_home["env"], "versions")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    starred = [line for line in lines if line.startswith("*")]
    assert len(starred) == 1 and tiny_home["second"] in starred[0], result.stdout
    assert any(tiny_home["first"] in line and line.startswith(" ") for line in lines), result.stdout


def test_search_json_has_hits_with_strategy_provenance(tiny_home):
    result = cli(tiny_home["env"], "search", QUERY, "--top-k", "5", "--json")
    assert result.returncode == 0, result.stderr[-4000:]
    payload = json.loads(result.stdout)
    assert payload["query"] == QUERY
    hits = payload["hits"]
    assert 0 < len(hits) <= 5
    for hit in hits:
        assert hit["strategy_scores"], hit
        assert set(hit["strategy_scores"]) <= {"bm25", "splade", "dense"}


# --- run --source: a user's own folder and table, no configuration written -------------------


def test_run_source_indexes_a_folder_and_a_table_and_search_answers_from_them(tmp_path):
    from retrieval_assets_tests.core.ingest.sources.test_formats import write_paper_pdf

    folder = tmp_path / "papers"
    folder.mkdir()
    write_paper_pdf(folder / "retrieval.pdf")
    for topic in ("glaciers", "volcanoes", "monsoons", "tsunamis", "auroras"):
        (folder / f"{topic}.md").write_text(f"# {topic.title()}\n\n## Methods\n\nWe measured {topic} in the field.\n")
    table = tmp_path / "rows.csv"
    table.write_text("id,title,text\nr1,Tidal energy,Tidal turbines convert the energy of ocean currents.\n")
    env = _env(tmp_path / "home", tmp_path / "dagster_home")
    result = cli(env, "run", "--source", str(folder), "--source", str(table))
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Building an index version of papers (files), rows (table)" in result.stdout
    assert "Built v-" in result.stdout and "7 documents" in result.stdout
    assert "Promotion gate: passed" in result.stdout

    found = cli(env, "search", "click logs training data", "--top-k", "3")
    assert found.returncode == 0, found.stderr[-4000:]
    first = found.stdout.splitlines()[1]
    # The hit names the file, its section and its pages.
    assert "retrieval.pdf" in first and "pp. 1-4" in first, found.stdout
    payload = json.loads(cli(env, "search", "ocean currents", "--top-k", "1", "--json").stdout)
    assert (payload["hits"][0]["doc_id"], payload["hits"][0]["tenant_id"]) == ("r1", "rows")


def test_run_source_names_a_missing_path(tmp_path):
    result = cli(_env(tmp_path / "home", tmp_path / "dagster_home"), "run", "--source", str(tmp_path / "nope"))
    assert result.returncode != 0
    assert f"source not found: {tmp_path / 'nope'}" in result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_answers_health_and_search(tiny_home, tmp_path):
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "retrieval_assets.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=tiny_home["env"],
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVE_READY_TIMEOUT_S
        health = None
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
                    health = json.loads(response.read())
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        assert health is not None, "serve never became ready:\n" + (tmp_path / "serve.log").read_text()[-4000:]
        assert health["status"] == "ok"
        request = urllib.request.Request(
            f"{base}/search",
            data=json.dumps({"query": QUERY, "top_k": 3}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 200
            result = json.loads(response.read())
        assert 0 < len(result["hits"]) <= 3
        assert all(hit["strategy_scores"] for hit in result["hits"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def test_rollback_to_an_unknown_version_is_a_clear_error(tiny_home):
    pointer_before = IndexVersions(tiny_home["home"] / "indexes").pointer()
    result = cli(tiny_home["env"], "rollback", "--to", "nonexistent")
    assert result.returncode != 0
    assert IndexVersions(tiny_home["home"] / "indexes").pointer() == pointer_before
    # The last line says what went wrong, naming the version ...
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("rollback:") and "nonexistent" in message, result.stderr[-4000:]
    # ... and the user sees no stack trace.
    for marker in ("Traceback", "Stack Trace:", 'File "'):
        assert marker not in result.stderr, result.stderr[-4000:]


def test_rollback_moves_the_pointer_back_and_the_ui_agrees(tiny_home):
    versions = IndexVersions(tiny_home["home"] / "indexes")
    assert versions.promoted().id == tiny_home["second"]
    result = cli(tiny_home["env"], "rollback")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"serving {tiny_home['first']} (was {tiny_home['second']})" in result.stdout
    promoted = versions.promoted()
    assert promoted.id == tiny_home["first"]

    # The rollback run is recorded on the DAGSTER_HOME instance with a promoted_index
    # materialization naming the version the pointer now names.
    instance = DagsterInstance.from_config(str(tiny_home["dagster_home"]))
    event = instance.get_latest_materialization_event(AssetKey("promoted_index"))
    assert event is not None
    run = instance.get_run_by_id(event.run_id)
    assert run.job_name == "rollback_job"
    assert event.asset_materialization.metadata["version"].value == promoted.id
    assert event.asset_materialization.metadata["previous"].value == tiny_home["second"]

    result = cli(tiny_home["env"], "versions")
    starred = [line for line in result.stdout.splitlines() if line.startswith("*")]
    assert len(starred) == 1 and tiny_home["first"] in starred[0], result.stdout


def test_rollback_to_a_version_the_gate_refused_needs_force_and_is_recorded(tiny_home, tiny_beir, tmp_path):
    # A copy of the tiny home, whichever version the other tests left serving.
    home = tmp_path / "home"
    shutil.copytree(tiny_home["home"], home)
    env, dagster_home = _env(home, tmp_path / "dagster_home"), tmp_path / "dagster_home"
    versions = IndexVersions(home / "indexes")
    serving = versions.promoted().id
    refused = tiny_home["first"] if serving == tiny_home["second"] else tiny_home["second"]
    # Judged again against what serves, with a latency budget no search meets: the gate refuses it.
    strict = deployment_resources(
        home, CatalogResource(format="beir", path=str(tiny_beir)), gate=PromotionGateResource(p95_budget_ms=0.001)
    )
    evaluate_version(strict, refused, configurations=[])
    verdict, reasons = versions.version(refused).gate_verdict()
    assert verdict == "refused" and any("budget" in reason for reason in reasons), reasons

    # Without --force: nothing moves, and the message names the verdict, its reason and the way out.
    pointer_before = versions.pointer()
    result = cli(env, "rollback", "--to", refused)
    assert result.returncode == 2, result.stderr[-4000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("rollback: the promotion gate refused " + refused), message
    assert "budget" in message and "--force" in message, message
    assert versions.pointer() == pointer_before

    # With it: served, and recorded as a forced rollback (who, when, why) in the history, `versions` and the UI.
    result = cli(env, "rollback", "--to", refused, "--force", "--reason", "the new version lost documents")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"serving {refused} (was {serving})" in result.stdout and "forced" in result.stdout, result.stdout
    assert versions.promoted().id == refused and versions.pointer()["forced"]
    [event] = [e for e in versions.history() if e["event"] == "rolled_back" and e.get("forced")]
    assert event["version"] == refused and event["gate"] == "refused" and event["forced_by"]
    assert event["forced_why"] == "the new version lost documents" and any("budget" in r for r in event["gate_reasons"])

    listed = cli(env, "versions")
    [starred] = [line for line in listed.stdout.splitlines() if line.startswith("*")]
    assert refused in starred and "gate=refused" in starred, listed.stdout
    assert f"FORCED ROLLBACK (forced at {event['at']} by {event['forced_by']}: the new version lost" in starred

    instance = DagsterInstance.from_config(str(dagster_home))
    shown = instance.get_latest_materialization_event(AssetKey("promoted_index")).asset_materialization
    assert shown.description == "forced rollback past a refused gate"
    assert shown.metadata["forced"].value is True and shown.metadata["gate"].value == "refused"
    assert shown.metadata["forced_why"].value == "the new version lost documents"
    history = {record.data["version"]: record.data for record in shown.metadata["quality_history"].value.records}
    assert history[refused]["forced_rollback"].startswith("forced at ") and history[refused]["promoted"] is True


# --- bench ------------------------------------------------------------------------------------


def test_bench_prints_figures_as_the_last_json_line(tiny_beir, tmp_path):
    env = _env(tmp_path / "unused_home", tmp_path / "dagster_home")
    workdir = tmp_path / "bench"
    result = cli(env, "bench", "--dataset", str(tiny_beir), "--no-rerank", "--workdir", str(workdir))
    assert result.returncode == 0, result.stderr[-4000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"dataset", "docs", "queries", "build_seconds", "encode_query_p95_ms", "runs", "default"} <= set(figures)
    assert figures["dataset"] == tiny_beir.name
    parseable = 0
    for line in (tiny_beir / "corpus.jsonl").read_text().splitlines():
        try:
            json.loads(line)
            parseable += 1
        except json.JSONDecodeError:
            pass  # the fixture's one malformed line is quarantined, not counted
    assert figures["docs"] == parseable and figures["queries"] == 5
    assert "hybrid" in figures["runs"] and figures["default"] == "hybrid"
    assert not any("rerank" in name for name in figures["runs"])
    # Five gold queries are too few to cross-validate (fewer than 50): no tuned_cv figure.
    assert "tuned_cv" not in figures["runs"]
    # --workdir keeps the built version there.
    assert IndexVersions(workdir / "indexes").sealed()


# --- help -------------------------------------------------------------------------------------


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from _commands(command, (*path, name))


def test_every_option_of_every_command_shows_its_default_in_help() -> None:
    from retrieval_assets.cli import build_parser

    for path, command in _commands(build_parser()):
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, (path, action.option_strings)
            if not action.required:
                help_text = " ".join(command._get_formatter()._expand_help(action).split())
                assert "default" in help_text and help_text in text, (path, action.option_strings, help_text)
