"""``bench-encoders`` through the CLI with the packaged models: figures, kept outputs, bad records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_assets.cli import main
from retrieval_assets_tests.embedding_server import MODEL_NAME, embedding_server


def _figures(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["bench-encoders", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_bench_encoders_reports_each_encoder_and_compares_kept_outputs(
    capsys: pytest.CaptureFixture[str], tiny_beir: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "cpu.npz"
    common = ["--dataset", str(tiny_beir), "--documents", "6", "--alone", "3", "--device", "cpu"]
    first = _figures(capsys, *common, "--reference-out", str(kept))
    assert (first["documents"], first["alone"], first["queries"]) == (6, 3, 5)
    assert first["machine"]["cores"] >= 1
    for role in ("dense", "sparse"):
        assert first[role]["device"] == "cpu"
        assert first[role]["documents_per_s"] > 0
        assert 0 < first[role]["query"]["p50_ms"] <= first[role]["query"]["p95_ms"]
        assert "against_reference" not in first[role]
    # The dense graph is exact: a text's vector is the same in its batch as alone.
    assert first["dense"]["batch_vs_alone_max_abs"] == 0.0
    assert first["sparse"]["batch_vs_alone_max_abs"] < 1e-4

    second = _figures(capsys, *common, "--reference", str(kept))
    assert second["dense"]["against_reference"] == {"documents": 6, "max_abs": 0.0, "min_cosine": pytest.approx(1.0)}
    assert second["sparse"]["against_reference"] == {"documents": 6, "max_abs": 0.0, "documents_with_other_terms": 0}


def test_a_malformed_record_is_named_by_file_and_line(capsys: pytest.CaptureFixture[str], tiny_beir: Path) -> None:
    # The tiny set's last line is a cut-off record.
    last_line = len((tiny_beir / "corpus.jsonl").read_text().splitlines())
    assert main(["bench-encoders", "--dataset", str(tiny_beir), "--documents", "100", "--device", "cpu"]) == 2
    assert f"corpus.jsonl:{last_line}: malformed record" in capsys.readouterr().err


def test_a_dense_endpoint_is_measured_beside_the_same_model_in_process(
    capsys: pytest.CaptureFixture[str], tiny_beir: Path
) -> None:
    with embedding_server() as server:
        figures = _figures(
            capsys,
            *("--dataset", str(tiny_beir), "--documents", "6", "--alone", "2", "--device", "cpu"),
            *("--dense-endpoint", server.base_url, "--dense-model", MODEL_NAME),
        )
    assert figures["models"]["dense_endpoint"] == server.base_url
    assert figures["dense"]["device"] == f"{server.base_url}/embeddings"
    assert figures["dense_in_process"]["device"] == "cpu"
    for role in ("dense", "dense_in_process"):
        assert figures[role]["model"] == MODEL_NAME and figures[role]["documents_per_s"] > 0
    # The server runs the same model: its vectors are the in-process ones.
    assert figures["dense"]["against_in_process"]["documents"] == 6
    assert figures["dense"]["against_in_process"]["min_cosine"] > 0.999
