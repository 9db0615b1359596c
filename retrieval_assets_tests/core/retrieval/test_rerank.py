"""Cross-encoder rerankers against real models (the packaged INT8 ms-marco MiniLM; no mocks)."""

from __future__ import annotations

import time
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest

from retrieval_assets.core.embed.base import ModelLoadError
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.onnx_graph import GRAPH_AS_SHIPPED, GRAPH_DEQUANTIZED
from retrieval_assets.core.embed.packaged import PACKAGED_MODELS, resolve_model_path
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.rerank.cross_encoder import (
    OnnxCrossEncoder,
    SentenceTransformerCrossEncoder,
    load_reranker,
    plan_pair_batches,
)

MODEL = "cross-encoder/ms-marco-MiniLM-L-12-v2"
BOGUS_MODEL = "nonexistent-org/no-such-reranker-xyz"

# (query, relevant passage, irrelevant but same-domain passages)
CASES = [
    (
        "Does insulin therapy lower HbA1c in type 2 diabetes?",
        "In patients with type 2 diabetes, adding basal insulin to oral agents lowered HbA1c by "
        "1.2 percentage points over 24 weeks compared with oral agents alone.",
        [
            "Statins reduce LDL cholesterol and the risk of myocardial infarction in adults.",
            "Influenza vaccination of the elderly reduced hospital admissions for pneumonia.",
            "Mutations in BRCA1 raise the lifetime risk of breast and ovarian cancer.",
        ],
    ),
    (
        "What causes sickle cell anemia?",
        "Sickle cell anemia is caused by a point mutation in the beta-globin gene that replaces "
        "glutamic acid with valine, so haemoglobin polymerises when deoxygenated.",
        [
            "Iron deficiency is the most common cause of anaemia in children worldwide.",
            "Malaria parasites invade red blood cells after a bite from an infected mosquito.",
            "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation.",
        ],
    ),
    (
        "Is vitamin D supplementation associated with fewer fractures?",
        "In a meta-analysis of randomised trials, vitamin D with calcium reduced hip fractures "
        "in older adults, whereas vitamin D alone did not.",
        [
            "Vitamin C deficiency causes scurvy, with bleeding gums and poor wound healing.",
            "Bisphosphonates can cause osteonecrosis of the jaw after dental surgery.",
            "Smoking cessation lowers the risk of lung cancer within ten years.",
        ],
    ),
]

LONG_PASSAGE = "Gene expression in tumour cells varies with hypoxia and nutrient supply. " * 200


@pytest.fixture(scope="module")
def reranker() -> Reranker:
    return load_reranker(MODEL, device="cpu")


@pytest.fixture(scope="module")
def tiny_cross_encoder_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny CrossEncoder (the packaged SPLADE-tiny body, seeded head) saved two ways.

    The first is a sentence-transformers save, the second a bare transformers save
    (config.json with BertForSequenceClassification), as older hub cross-encoders are.
    """
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    body = resolve_model_path("splade-tiny").path
    model = CrossEncoder(body, num_labels=1, device="cpu", local_files_only=True)
    st_dir, hf_dir = tmp_path_factory.mktemp("st_cross_encoder"), tmp_path_factory.mktemp("hf_cross_encoder")
    model.save_pretrained(str(st_dir))
    model.model.save_pretrained(str(hf_dir))
    model.tokenizer.save_pretrained(str(hf_dir))
    return st_dir, hf_dir


def _ranks(scores: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(-scores, kind="stable"), kind="stable")


# --- the packaged ONNX cross-encoder -------------------------------------------------------


def test_packaged_model_loads_as_onnx(reranker: Reranker) -> None:
    assert isinstance(reranker, OnnxCrossEncoder)
    assert reranker.model_name == MODEL
    assert reranker.max_length == 256


@pytest.mark.parametrize(("query", "relevant", "others"), CASES)
def test_relevant_passage_outranks_irrelevant(
    reranker: Reranker, query: str, relevant: str, others: list[str]
) -> None:
    scores = reranker.score(query, [*others, relevant])
    assert scores.dtype == np.float32 and scores.shape == (len(others) + 1,)
    assert int(np.argmax(scores)) == len(others)


def test_scores_are_deterministic(reranker: Reranker) -> None:
    query, relevant, others = CASES[0]
    passages = [relevant, *others, LONG_PASSAGE]
    first = reranker.score(query, passages)
    assert np.array_equal(first, reranker.score(query, passages))


def test_empty_passage_list(reranker: Reranker) -> None:
    scores = reranker.score("any query", [])
    assert scores.shape == (0,) and scores.dtype == np.float32


def test_long_passages_are_truncated(reranker: Reranker) -> None:
    query, relevant, _ = CASES[1]
    scores = reranker.score(query, [LONG_PASSAGE, relevant, LONG_PASSAGE + " sickle"])
    assert np.isfinite(scores).all()
    assert int(np.argmax(scores)) == 1
    # Beyond the model's 512 positions, max_length is clamped instead of failing in the model.
    wide = load_reranker(MODEL, device="cpu", max_length=4096)
    assert wide.max_length == 512
    assert np.isfinite(wide.score(LONG_PASSAGE, [LONG_PASSAGE])).all()


def test_passage_order_does_not_change_ranks(reranker: Reranker) -> None:
    query, relevant, others = CASES[2]
    passages = [relevant, *others, LONG_PASSAGE, "Vitamin D and bone density in adults."]
    scores = reranker.score(query, passages)
    order = np.random.default_rng(0).permutation(len(passages))
    permuted = reranker.score(query, [passages[i] for i in order])
    assert np.array_equal(_ranks(permuted), _ranks(scores[order]))


def test_scores_are_bit_identical_alone_or_in_one_padded_batch(reranker: Reranker) -> None:
    assert isinstance(reranker, OnnxCrossEncoder) and reranker.graph == GRAPH_DEQUANTIZED
    query, relevant, others = CASES[0]
    passages = [relevant, *others, LONG_PASSAGE]
    single = load_reranker(MODEL, device="cpu", batch_size=1).score(query, passages)
    whole = OnnxCrossEncoder(resolve_model_path(MODEL).path, batch_size=32, max_batch_tokens=None)
    assert np.array_equal(whole.score(query, passages), single)
    assert np.array_equal(reranker.score(query, passages), single)


def test_int8_cross_encoder_runs_as_shipped_and_ranks_alike(reranker: Reranker) -> None:
    """INT8 scores shift a little with batch company; the ranking must not."""
    int8 = load_reranker(MODEL + "-int8", device="cpu")
    assert isinstance(int8, OnnxCrossEncoder) and int8.graph == GRAPH_AS_SHIPPED
    query, relevant, others = CASES[0]
    passages = [relevant, *others]
    scores = int8.score(query, passages)
    assert np.abs(scores - reranker.score(query, passages)).max() < 1.0
    assert int(np.argmax(scores)) == 0


def test_plan_pair_batches_respects_limits_and_ignores_input_order() -> None:
    token_ids = [[1] * n for n in (5, 3, 5, 9, 3, 4)] + [[2] * 5]
    batches = plan_pair_batches(token_ids, batch_size=2, max_batch_tokens=12)
    assert sorted(i for batch in batches for i in batch) == list(range(len(token_ids)))
    for batch in batches:
        assert len(batch) <= 2
        assert len(batch) * max(len(token_ids[i]) for i in batch) <= 12 or len(batch) == 1
    # The same pairs in another order form the same batches (as sets of token ids).
    order = [6, 3, 0, 5, 2, 1, 4]
    shuffled = plan_pair_batches([token_ids[i] for i in order], batch_size=2, max_batch_tokens=12)
    as_ids = [[tuple(token_ids[i]) for i in batch] for batch in batches]
    assert as_ids == [[tuple(token_ids[order[i]]) for i in batch] for batch in shuffled]
    assert plan_pair_batches(token_ids, batch_size=32, max_batch_tokens=None) == [[1, 4, 5, 0, 2, 6, 3]]


# --- failures -------------------------------------------------------------------------------


def test_bogus_model_fails_fast_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    started = time.monotonic()
    with pytest.raises(ModelLoadError, match=BOGUS_MODEL) as caught:
        load_reranker(BOGUS_MODEL, device="cpu")
    assert time.monotonic() - started < 30
    assert MODEL in str(caught.value)  # says which cross-encoder works offline


def test_bad_paths_fail_naming_them(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(ModelLoadError, match="missing"):
        load_reranker(missing, device="cpu")
    with pytest.raises(ModelLoadError, match="holds no model"):
        load_reranker(str(tmp_path), device="cpu")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not an onnx model")
    (broken / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="broken"):
        load_reranker(str(broken), device="cpu")


def test_non_cross_encoders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="dense model, not a cross-encoder"):
        load_reranker("BAAI/bge-small-en-v1.5", device="cpu")
    with pytest.raises(ModelLoadError, match="not a cross-encoder"):
        load_reranker("splade-tiny", device="cpu")
    # Dense ONNX weights in a directory nobody has described: the load-time probe run refuses
    # them by their output shape (token vectors, not one logit per pair).
    unknown = tmp_path / "unknown_onnx"
    unknown.mkdir()
    for file in PACKAGED_MODELS["BAAI/bge-small-en-v1.5"].locate().iterdir():
        (unknown / file.name).symlink_to(file)
    with pytest.raises(ModelLoadError, match="one relevance logit per pair") as caught:
        load_reranker(str(unknown), device="cpu")
    assert str(unknown) in str(caught.value)


# --- sentence-transformers CrossEncoder adapter ------------------------------------------------


def test_sentence_transformers_cross_encoder_dirs(tiny_cross_encoder_dirs: tuple[Path, Path]) -> None:
    st_dir, hf_dir = tiny_cross_encoder_dirs
    passages = ["short", "a longer passage about gene expression", LONG_PASSAGE]
    results = []
    for path in (st_dir, hf_dir):
        model = load_reranker(str(path), device="cpu", max_length=64)
        assert isinstance(model, SentenceTransformerCrossEncoder)
        assert model.model_name == str(path)
        scores = model.score("gene expression", passages)
        assert scores.dtype == np.float32 and scores.shape == (3,)
        assert np.array_equal(scores, model.score("gene expression", passages))
        assert model.score("gene expression", []).shape == (0,)
        results.append(scores)
    # Both saves hold the same weights.
    np.testing.assert_allclose(results[0], results[1], atol=1e-5)


def test_cross_encoder_dir_is_not_a_dense_model(tiny_cross_encoder_dirs: tuple[Path, Path]) -> None:
    _, hf_dir = tiny_cross_encoder_dirs
    resolved = resolve_model_path(str(hf_dir))
    assert (resolved.kind, resolved.role) == ("sentence_transformers", "cross_encoder")
    with pytest.raises(ModelLoadError, match="cross-encoder model, not a dense encoder"):
        load_dense_encoder(str(hf_dir), device="cpu")
