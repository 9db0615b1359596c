"""Frozen gold: written once per fingerprint, changed only by retirements and explicit redraws."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.evaluation.gold.frozen import DELETED, GoldStore, GoldStoreError
from retrieval_assets.core.evaluation.gold.known_item import generate_known_item_gold
from retrieval_assets.core.evaluation.gold.model import GeneratedGold
from retrieval_assets_tests.core.evaluation.gold.corpus import documents

KEY = "catalog-3f2a"


def _gold(seed: int = 13) -> tuple[pd.DataFrame, GeneratedGold]:
    frame = documents({"a": 40})
    copy = frame.iloc[[0]].assign(doc_id="a-copy")
    frame = pd.concat([frame, copy])
    return frame, generate_known_item_gold(frame, seed=seed, size=40, min_size=1, created_at="t0")


def test_freeze_writes_once_and_refuses_other_gold(tmp_path: Path) -> None:
    store = GoldStore(tmp_path)
    assert store.current(KEY) is None
    _, gold = _gold()
    path = store.freeze(KEY, gold)
    assert path == tmp_path / KEY / f"{gold.fingerprint}.json"
    assert json.loads((tmp_path / KEY / "current.json").read_text()) == {"fingerprint": gold.fingerprint}
    assert store.current(KEY) == gold
    written = path.stat().st_mtime_ns
    assert store.freeze(KEY, gold.model_copy(update={"created_at": "t1"})) == path  # the same gold: kept as it was
    assert path.stat().st_mtime_ns == written and store.current(KEY) == gold
    with pytest.raises(GoldStoreError, match="redraw"):
        store.freeze(KEY, _gold(seed=14)[1])
    with pytest.raises(ValueError, match="plain file name"):
        store.current("../elsewhere")


def test_deleted_documents_retire_their_queries(tmp_path: Path) -> None:
    store = GoldStore(tmp_path)
    frame, gold = _gold()
    first = store.freeze(KEY, gold)
    all_ids = set(frame["doc_id"])
    assert store.retire_missing(KEY, all_ids) == gold  # nothing deleted: nothing changes
    gone_query = next(qid for qid, doc in gold.query_doc.items() if doc == "a-0005")
    duplicated = next(qid for qid, rel in gold.qrels.items() if "a-copy" in rel)
    updated = store.retire_missing(KEY, all_ids - {"a-0005", "a-copy"}, at="t2")
    assert updated.retired == {gone_query: DELETED}
    assert gone_query not in updated.queries and gone_query not in updated.qrels
    assert updated.query_doc[gone_query] == "a-0005"  # kept for the record
    assert updated.qrels[duplicated] == {"a-0000": 1}
    assert len(updated.queries) == len(gold.queries) - 1
    (change,) = updated.history
    assert change.action == "retire" and change.at == "t2" and change.retired == {gone_query: DELETED}
    assert change.pruned == {duplicated: ["a-copy"]}
    assert (change.from_fingerprint, change.to_fingerprint) == (gold.fingerprint, updated.fingerprint)
    assert store.current(KEY) == updated and first.exists()
    assert store.retire_missing(KEY, all_ids - {"a-0005", "a-copy"}) == updated


def test_redraw_replaces_the_current_gold_and_keeps_the_old_file(tmp_path: Path) -> None:
    store = GoldStore(tmp_path)
    _, old = _gold()
    old_path = store.freeze(KEY, old)
    _, new = _gold(seed=99)
    new_path = store.redraw(KEY, new, at="t3")
    current = store.current(KEY)
    assert current is not None and current.fingerprint == new.fingerprint != old.fingerprint
    assert old_path.exists() and new_path.exists() and store.load(old_path) == old
    assert [(c.action, c.from_fingerprint) for c in current.history] == [("redraw", old.fingerprint)]
    with pytest.raises(GoldStoreError, match="no frozen gold"):
        store.retire_missing("other-catalog", set())
