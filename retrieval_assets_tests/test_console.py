"""What ``retrieval-assets run`` prints, on small inputs: the build, each configuration, the verdict, the hits."""

from __future__ import annotations

from retrieval_assets.console import build_line, evaluation_lines, result_lines, verdict_line
from retrieval_assets.core.models import RetrievalResult

REPORT = {
    "default": "hybrid",
    "served": "tuned_cv",
    "runs": {"hybrid": {"ndcg@10": 0.71, "p95_ms": 12.5}, "tuned_cv": {"ndcg@10": 0.74, "p95_ms": 13.0}},
    "gate": {"passed": True, "reasons": []},
}


def test_the_build_line_names_the_candidate_its_documents_and_chunks() -> None:
    assert build_line("v1", False, 120, 1, 340) == "Built v1: 120 documents, 1 quarantined, 340 chunks"
    assert build_line("v1", False, 120, 0, 340) == "Built v1: 120 documents, 340 chunks"
    assert "reused" in build_line("v1", True, 0, 0, 0)


def test_the_evaluation_header_says_what_follows_and_marks_the_served_configuration() -> None:
    lines = evaluation_lines("v1", REPORT)
    assert lines[0] == "Candidate v1, each configuration's scores on the gold queries:"
    assert "configuration: metrics" not in lines[0]
    assert lines[1:] == ["  hybrid: ndcg@10=0.71, p95_ms=12.5", "  tuned_cv (served): ndcg@10=0.74, p95_ms=13.0"]
    # Without a served configuration, the default is the one marked.
    assert evaluation_lines("v1", {**REPORT, "served": None})[1] == "  hybrid (served): ndcg@10=0.71, p95_ms=12.5"


def test_the_verdict_line_says_passed_or_why_refused_and_what_serves() -> None:
    assert verdict_line(REPORT, "v1") == "Promotion gate: passed. Serving: v1"
    refused = {"gate": {"passed": False, "reasons": ["ndcg@10 fell", "p95 rose"]}}
    assert verdict_line(refused, None) == "Promotion gate: REFUSED: ndcg@10 fell; p95 rose. Serving: nothing"


def test_result_lines_show_each_hit_with_its_strategy_ranks() -> None:
    result = RetrievalResult.model_validate(
        {
            "query": "b12",
            "strategies": ["bm25", "dense"],
            "fusion": "minmax",
            "timings_ms": {"total_ms": 12.0},
            "hits": [
                {
                    "doc_id": "d1",
                    "chunk_id": "d1#0",
                    "score": 0.9,
                    "text": "Vitamin B12 and homocysteine",
                    "section": "body",
                    "strategy_scores": {"bm25": {"rank": 1, "score": 3.2}},
                }
            ],
        }
    )
    lines = result_lines(result)
    assert lines[0].startswith("query: 'b12'  strategies: bm25, dense  fusion: minmax") and "(12 ms)" in lines[0]
    assert lines[1].startswith("  1. 0.9000  d1  [d1#0, body]  Vitamin B12")
    assert lines[2].strip() == "bm25#1=3.200"
