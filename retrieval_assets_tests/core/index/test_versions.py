"""Index versions, the promotion pointer, rollback and pruning, the gate, and a promotion under load."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.evaluation.gate import GateSettings, decide
from retrieval_assets.core.index.versions import IndexVersions, RefusedVersionError, VersionError
from retrieval_assets.core.models import SearchRequest
from retrieval_assets.defs.resources import IndexStorageResource, ModelResource, SearchResource
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog

TOOLS = TEST_DATA / "tools_with_relations.jsonl"


def _sealed(versions: IndexVersions, fingerprint: str):
    version = versions.candidate(fingerprint)
    versions.seal(version, fingerprint)
    return version


def test_promote_rollback_and_prune(tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path)
    assert versions.promoted() is None
    with pytest.raises(VersionError, match="no earlier"):
        versions.rollback()
    unsealed = versions.candidate("f" * 64)
    with pytest.raises(VersionError, match="incomplete"):
        versions.promote(unsealed, reason="test")

    v1, v2, v3 = (_sealed(versions, c * 64) for c in "abc")
    versions.promote(v1, reason="first")
    versions.promote(v2, reason="second")
    assert versions.promoted() == v2 and versions.pointer()["previous"] == v1.id
    assert versions.rollback() == v1 and versions.promoted() == v1
    assert versions.rollback(to=v3.id) == v3
    events = [entry["event"] for entry in versions.history()]
    assert events == ["promoted", "promoted", "promoted", "rolled_back", "promoted", "rolled_back"]

    v4, v5 = _sealed(versions, "d" * 64), _sealed(versions, "e" * 64)
    # Newest two kept, plus the promoted version (v3) and the one a rollback returns to (v1).
    assert sorted(versions.prune(keep=2)) == [v2.id]
    assert [v.id for v in versions.sealed()] == [v1.id, v3.id, v4.id, v5.id]
    assert not v2.path.exists() and unsealed.path.exists()
    with pytest.raises(VersionError, match="pruned"):
        versions.rollback(to=v2.id)
    with pytest.raises(VersionError, match="not a version id"):
        versions.version("../outside")


def test_a_rollback_to_a_version_the_gate_refused_needs_force_and_is_recorded(tmp_path: Path) -> None:
    versions = IndexVersions(tmp_path)
    refused, good = _sealed(versions, "a" * 64), _sealed(versions, "b" * 64)
    refused.write_evaluation({"gate": {"passed": False, "reasons": ["gold of tenant acme: ndcg@10 0.5 fell"]}})
    good.write_evaluation({"gate": {"passed": True, "reasons": []}})
    versions.promote(good, reason="passed the promotion gate")

    with pytest.raises(RefusedVersionError, match=r"refused .*gold of tenant acme: ndcg@10 0\.5 fell.*force"):
        versions.rollback(to=refused.id)
    assert versions.promoted() == good and [e["event"] for e in versions.history()] == ["promoted"]

    assert versions.rollback(to=refused.id, force=True, by="alice", why="the new model broke search") == refused
    pointer = versions.pointer()
    assert pointer["forced"] and pointer["forced_by"] == "alice"
    assert pointer["reason"] == f"forced rollback from {good.id}"
    [event] = [e for e in versions.history() if e["event"] == "rolled_back"]
    assert event["forced"] and event["gate"] == "refused" and event["forced_why"] == "the new model broke search"
    assert event["gate_reasons"] == ["gold of tenant acme: ndcg@10 0.5 fell"]
    rows = {row["version"]: row for row in versions.quality_history()}
    assert rows[refused.id]["promoted"] and rows[refused.id]["gate"] == "refused"
    assert rows[refused.id]["forced_rollback"].startswith(f"forced at {event['at']} by alice: the new model broke")
    assert rows[good.id]["forced_rollback"] is None
    # Back to a version the gate passed needs nothing, and is no forced rollback.
    assert versions.rollback() == good and not versions.pointer().get("forced")


def test_pointer_is_replaced_whole(tmp_path: Path) -> None:
    """Readers racing a thousand promotions never see a partial or empty pointer."""
    versions = IndexVersions(tmp_path)
    a, b = _sealed(versions, "a" * 64), _sealed(versions, "b" * 64)
    versions.promote(a, reason="start")
    seen, torn, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            text = (tmp_path / "promoted.json").read_text()
            try:
                seen.append(json.loads(text)["version"])
            except (ValueError, KeyError):
                torn.append(text)

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(500):
        versions.promote(b if n % 2 == 0 else a, reason="flip")
    stop.set()
    reader.join()
    assert torn == [], f"{len(torn)} torn reads, e.g. {torn[0]!r}"
    assert set(seen) <= {a.id, b.id} and len(seen) > 1


def test_a_reader_sees_every_promotion_another_process_makes(tmp_path: Path) -> None:
    """The pointer is cached by file identity: flips within the clock's granularity, between
    versions whose pointers have the same size, are each seen at once."""
    serving, building = IndexVersions(tmp_path), IndexVersions(tmp_path)
    a, b = _sealed(building, "a" * 64), _sealed(building, "b" * 64)
    for n in range(200):
        target = b if n % 2 else a
        building.promote(target, reason="flip")
        assert serving.promoted().id == target.id
    serving.pointer()["version"] = "changed by a caller"
    assert serving.pointer()["version"] == target.id


def test_gate_floors_drops_latency_and_missing_gold() -> None:
    settings = GateSettings(min_ndcg_at_10=0.3, max_ndcg_drop=0.01, p95_budget_ms=100)
    good = {"ndcg@10": 0.70, "recall@100": 0.95, "p95_ms": 20.0}
    assert decide(good, None, settings).passed
    assert decide(good, {**good, "ndcg@10": 0.705}, settings).passed  # within the margin

    worse = decide({**good, "ndcg@10": 0.65}, good, settings)
    assert not worse.passed and "below the promoted 0.7000" in worse.reasons[0]
    assert worse.comparison["ndcg@10"] == {
        "candidate": 0.65, "promoted": 0.70, "best_ever": None, "floor": 0.3, "allowed_drop": 0.01
    }
    broken = decide({"ndcg@10": 0.05, "recall@100": 0.1, "p95_ms": 250.0}, None, settings)
    assert len(broken.reasons) == 3 and "budget" in broken.reasons[-1]

    assert decide(None, None, settings).passed
    assert not decide(None, None, settings.model_copy(update={"promote_without_gold": False})).passed


def _catalog(path: Path, records: list[str]) -> Path:
    path.write_text("\n".join(records) + "\n")
    return path


class HeldQuery:
    """A query encoder that, once armed, holds the next query mid-flight (after the pointer was
    read, before any engine is searched) until released."""

    def __init__(self) -> None:
        self.armed, self.entered, self.release = False, threading.Event(), threading.Event()

    def wrap(self, encoder: DenseEncoder) -> DenseEncoder:
        held = self

        class Held(DenseEncoder):
            model_name, dim, max_length = encoder.model_name, encoder.dim, encoder.max_length

            def encode_documents(self, texts, progress=None):
                return encoder.encode_documents(texts, progress)

            def encode_queries(self, texts):
                if held.armed:
                    held.armed = False
                    held.entered.set()
                    assert held.release.wait(60), "the held query was never released"
                return encoder.encode_queries(texts)

        return Held()


HELD = HeldQuery()


class HeldModels(ModelResource):
    def dense_encoder(self) -> DenseEncoder:
        return HELD.wrap(super().dense_encoder())


def test_requests_in_flight_finish_on_the_old_or_the_new_version(tmp_path: Path) -> None:
    storage = IndexStorageResource(home=str(tmp_path))
    lines = TOOLS.read_text().splitlines()
    versions = storage.versions()
    _, old = build_catalog(tmp_path, _catalog(tmp_path / "old.jsonl", lines[:9]))
    _, new = build_catalog(tmp_path, _catalog(tmp_path / "new.jsonl", lines[9:]))
    versions.promote(old, reason="test")
    service = SearchResource(storage=storage, models=HeldModels()).service
    request = SearchRequest(query="sequence alignment and variant calling tools", top_k=5)

    def ids() -> list[str]:
        return [hit.doc_id for hit in service.run(request).hits]

    before = ids()
    versions.promote(new, reason="test")
    after = ids()
    versions.promote(old, reason="test")
    assert before != after and set(before).isdisjoint(after)

    # One request is provably mid-flight on the old version when the pointer moves, and another
    # request opens the new version meanwhile: the held one still finishes on the old version.
    HELD.armed = True
    held_answer: list[list[str]] = []
    in_flight = threading.Thread(target=lambda: held_answer.append(ids()))
    in_flight.start()
    assert HELD.entered.wait(60), "the request never reached the encoder"
    versions.promote(new, reason="promotion during a request")
    assert ids() == after
    HELD.release.set()
    in_flight.join(60)
    assert held_answer == [before]

    answers, errors = [], []

    def query() -> None:
        try:
            for _ in range(15):
                answers.append(ids())
        except Exception as exc:  # noqa: BLE001 - any failure is what the test reports
            errors.append(exc)

    threads = [threading.Thread(target=query) for _ in range(4)]
    for thread in threads:
        thread.start()
    for n in range(6):
        versions.promote(new if n % 2 == 0 else old, reason="switch under load")
    for thread in threads:
        thread.join()
    service.close()
    assert not errors and answers and all(answer in (before, after) for answer in answers)
