"""``bench --generated-gold`` on the tiny BEIR set: known-item gold judged beside the real gold."""

from __future__ import annotations

import json
import math
from pathlib import Path

from retrieval_assets.bench.beir import run_benchmark
from retrieval_assets.bench.generated_gold import agreement_table
from retrieval_assets.cli import build_parser

CHEAP = ["bm25", "dense", "hybrid_rrf"]


def test_bench_generated_gold_reports_tau_and_both_columns(tiny_beir: Path, tmp_path: Path) -> None:
    # Three cheap configurations besides the default one (which the evaluation always measures).
    figures = json.loads(
        json.dumps(run_benchmark(tiny_beir, tmp_path, rerank=False, generated_gold=True, configurations=CHEAP))
    )
    measured = {"hybrid", *CHEAP}
    assert set(figures["runs"]) == measured
    generated = figures["generated_gold"]
    assert {"queries", "fingerprint", "kendall_tau", "ndcg_at_10", "real_ndcg_at_10"} <= set(generated)
    # A few dozen documents: fewer than the 200 wanted, so as many queries as they allow, and a warning.
    assert 2 <= generated["queries"] <= figures["docs"] and generated["warnings"]
    assert set(generated["ndcg_at_10"]) == set(generated["real_ndcg_at_10"]) == measured
    assert all(0.0 <= value <= 1.0 for value in generated["ndcg_at_10"].values())
    assert generated["real_ndcg_at_10"] == {name: figures["runs"][name]["ndcg@10"] for name in measured}
    # Concurrent callers shared query-encoder calls and got the same top-10 lists as lone ones.
    batching = figures["micro_batching"]
    assert batching["query_vectors_identical"] == batching["queries"] == figures["queries"]
    assert batching["served_top10_identical"] == batching["queries"] and batching["texts_per_encoder_call"] > 1
    tau = generated["kendall_tau"]
    assert isinstance(tau, float) and not math.isnan(tau) and -1.0 <= tau <= 1.0
    # How far two halves of the real gold agree: the ceiling tau is read against.
    halves = generated["real_split_half"]
    assert halves["queries_per_half"] == figures["queries"] // 2 and 0 < halves["splits"] <= 500
    assert halves["q1"] <= halves["median"] <= halves["q3"] and 0.0 <= halves["share_reaching_bar"] <= 1.0
    table = agreement_table(generated)
    assert all(name in table for name in measured) and "Kendall" in table and "real gold against itself" in table


def test_bench_generated_gold_flag_reaches_the_bench() -> None:
    parse = build_parser().parse_args
    assert parse(["bench", "--dataset", "d", "--generated-gold"]).generated_gold is True
    assert parse(["bench", "--dataset", "d"]).generated_gold is False
