"""``bench-gold-sensitivity`` on the tiny BEIR set: broken candidates judged by real and by generated gold."""

from __future__ import annotations

import json
from pathlib import Path

from retrieval_assets.bench.gold_sensitivity import (
    BREAKS,
    TRUNCATED_WORDS,
    _half_dropped,
    _truncated,
    run_sensitivity,
    verdict_table,
)
from retrieval_assets.cli import main
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.stores.base import MANIFEST_NAME


def test_breaks_cut_texts_and_drop_a_seeded_half() -> None:
    rows = [{"_id": str(i), "title": "t", "text": " ".join(f"w{j}" for j in range(50))} for i in range(9)]
    assert all(len(row["text"].split()) == TRUNCATED_WORDS and row["title"] == "t" for row in _truncated(rows))
    kept = _half_dropped(rows)
    assert len(kept) == 5 and kept == _half_dropped(rows) and kept == sorted(kept, key=lambda row: int(row["_id"]))
    assert set(BREAKS) == {"truncated", "half_dropped", "weaker_dense_model", "no_stemming"}


def test_each_break_is_judged_by_both_golds_against_the_intact_version(tiny_beir: Path, tmp_path: Path) -> None:
    figures = json.loads(json.dumps(run_sensitivity(tiny_beir, tmp_path, ["half_dropped", "no_stemming"])))
    assert figures["gold"]["real"]["kind"] == "curated" and figures["gold"]["real"]["queries"] == 5
    generated = figures["gold"]["generated"]
    assert generated["kind"] == "known_item" and generated["queries"] >= 2
    dropped = figures["breaks"]["half_dropped"]
    for kind in ("real", "generated"):
        # Half the documents gone: both golds lose queries, and the gate refuses the candidate.
        verdict = dropped[kind]
        assert verdict["refused"] and verdict["reasons"], verdict
        assert verdict["candidate_ndcg_at_10"] < verdict["promoted_ndcg_at_10"]
        assert verdict["promoted_ndcg_at_10"] == figures["gold"][kind]["intact_ndcg_at_10"]
    assert dropped["agree"] and set(figures["breaks"]["no_stemming"]) == {"real", "generated", "agree"}
    # Each break is judged against the intact version, which still serves at the end.
    for kind in ("real", "generated"):
        versions = IndexVersions(tmp_path / kind / "indexes")
        promoted = versions.promoted()
        assert promoted is not None and promoted.evaluation()["runs"]["hybrid"]["ndcg@10"] == (
            figures["gold"][kind]["intact_ndcg_at_10"]
        )
        stemmers = [json.loads((v.layout.lexical / MANIFEST_NAME).read_text())["stemmer"] for v in versions.sealed()]
        assert sorted(stemmers) == ["english", "english", "none"]
    # The generated home encoded nothing of the intact corpus: its vectors came from the real home.
    assert figures["gold"]["real"]["intact_encoded"] > 0 and figures["gold"]["generated"]["intact_encoded"] == 0
    table = verdict_table(figures)
    assert "half_dropped" in table and "REFUSED" in table


def test_an_unknown_break_is_named(capsys, tiny_beir: Path) -> None:
    assert main(["bench-gold-sensitivity", "--dataset", str(tiny_beir), "--breaks", "typo"]) == 2
    assert "unknown breaks ['typo']" in capsys.readouterr().err
