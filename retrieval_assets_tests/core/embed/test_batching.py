"""Micro-batching of query encoding: concurrent callers share model calls and each gets its own rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, SparseEncoder
from retrieval_assets.core.embed.batching import (
    BatcherClosedError,
    BatchingDenseEncoder,
    BatchingSparseEncoder,
    QueryBatcher,
    batching_dense_encoder,
    batching_sparse_encoder,
)
from retrieval_assets.core.embed.dense import load_dense_encoder
from retrieval_assets.core.embed.sparse import load_sparse_encoder
from retrieval_assets.core.settings import QueryBatchingSettings, RetrievalSettings

JOIN_S = 30  # no caller may hang: every thread must be done well within this


def _recording(batcher: QueryBatcher, outcomes: dict[str, object], error: type[BaseException]) -> Callable[[str], None]:
    """A caller thread's target: records the result for its text, or the ``error`` it raised."""

    def caller(text: str) -> None:
        try:
            outcomes[text] = batcher([text])
        except error as exc:
            outcomes[text] = exc

    return caller


class Recorder:
    """``encode``: one row per text (the text reversed, so a mixed-up row shows), recording each
    call. ``gate`` holds calls until set; ``fail_on`` raises for calls holding that text."""

    def __init__(self, delay_s: float = 0.0, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.threads: list[str] = []
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, texts: list[str]) -> list[str]:
        self.calls.append(list(texts))
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.gate.wait(JOIN_S)
        time.sleep(self.delay_s)
        if self.fail_on is not None and self.fail_on in texts:
            raise ValueError(f"cannot encode {self.fail_on!r}")
        return [text[::-1] for text in texts]


def _run_threads(targets: Sequence[threading.Thread]) -> None:
    for thread in targets:
        thread.start()
    for thread in targets:
        thread.join(JOIN_S)
        assert not thread.is_alive(), "a caller hung"


def _wait_until(condition, timeout_s: float = JOIN_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_many_threads_get_their_own_rows_in_order_and_share_calls() -> None:
    encode = Recorder(delay_s=0.005)
    batcher = QueryBatcher(encode, max_wait_ms=2.0, max_batch=8)
    results: dict[tuple[int, int], list[str]] = {}
    start = threading.Barrier(24)

    def caller(worker: int) -> None:
        start.wait()
        for round_ in range(10):
            texts = [f"w{worker}-r{round_}-t{i}" for i in range(1 + (worker + round_) % 3)]  # 1 to 3 texts
            results[worker, round_] = batcher(texts)

    _run_threads([threading.Thread(target=caller, args=(w,)) for w in range(24)])
    for (worker, round_), rows in results.items():
        assert rows == [f"w{worker}-r{round_}-t{i}"[::-1] for i in range(1 + (worker + round_) % 3)]
    requests, texts = len(results), sum(len(rows) for rows in results.values())
    assert sum(len(call) for call in encode.calls) == texts == batcher.texts
    assert len(encode.calls) == batcher.calls < requests / 2  # concurrent requests shared calls
    assert max(len(call) for call in encode.calls) <= 8  # never more than max_batch texts


def test_a_lone_caller_does_not_wait_and_encodes_in_its_own_thread() -> None:
    encode = Recorder()
    batcher = QueryBatcher(encode, max_wait_ms=5_000, max_batch=16)
    for _ in range(3):
        started = time.monotonic()
        assert batcher(["query"]) == ["yreuq"]
        assert time.monotonic() - started < 1.0  # far below max_wait_ms
    assert encode.threads == [threading.current_thread().name] * 3
    assert batcher([]) == [] and encode.calls[-1] == []  # nothing to encode still answers


def test_requests_arriving_during_a_call_go_together_in_the_next() -> None:
    encode = Recorder()
    encode.gate.clear()
    batcher = QueryBatcher(encode, max_wait_ms=1.0, max_batch=16)
    results: dict[str, list[str]] = {}

    def caller(text: str) -> None:
        results[text] = batcher([text])

    first = threading.Thread(target=caller, args=("first",))
    first.start()
    assert encode.entered.wait(JOIN_S)  # "first" holds the model
    others = [threading.Thread(target=caller, args=(f"q{i}",)) for i in range(5)]
    for thread in others:
        thread.start()
    _wait_until(lambda: len(batcher._queue) == 5)
    encode.gate.set()
    first.join(JOIN_S)
    for thread in others:
        thread.join(JOIN_S)
    assert encode.calls[0] == ["first"]
    assert sorted(encode.calls[1]) == [f"q{i}" for i in range(5)] and len(encode.calls) == 2
    assert results == {text: [text[::-1]] for text in ["first", *(f"q{i}" for i in range(5))]}


def test_after_shared_calls_a_new_leader_waits_for_company_up_to_max_wait() -> None:
    encode = Recorder()
    batcher = QueryBatcher(encode, max_wait_ms=10_000, max_batch=2)
    batcher._company_at = time.monotonic()  # as after a batch that held two requests
    results: list[list[str]] = []
    leader = threading.Thread(target=lambda: results.append(batcher(["a"])))
    leader.start()
    time.sleep(0.05)
    assert not encode.calls  # still gathering: it saw company a moment ago
    started = time.monotonic()
    results.append(batcher(["b"]))  # fills max_batch: the batch goes at once
    leader.join(JOIN_S)
    assert time.monotonic() - started < 5.0
    assert encode.calls == [["a", "b"]] and sorted(results) == [["a"], ["b"]]


def test_an_error_reaches_every_caller_of_its_batch_and_the_next_batch_runs() -> None:
    encode = Recorder(fail_on="poison")
    encode.gate.clear()
    batcher = QueryBatcher(encode, max_wait_ms=1.0, max_batch=16)
    outcomes: dict[str, object] = {}

    caller = _recording(batcher, outcomes, ValueError)

    first = threading.Thread(target=caller, args=("first",))
    first.start()
    assert encode.entered.wait(JOIN_S)
    queued = [threading.Thread(target=caller, args=(text,)) for text in ("x", "poison", "y")]
    for thread in queued:
        thread.start()
    _wait_until(lambda: len(batcher._queue) == 3)
    encode.gate.set()
    for thread in (first, *queued):
        thread.join(JOIN_S)
        assert not thread.is_alive()
    assert outcomes["first"] == ["tsrif"]
    for text in ("x", "poison", "y"):
        assert isinstance(outcomes[text], ValueError) and "poison" in str(outcomes[text])
    assert batcher(["after"]) == ["retfa"]  # the batcher still works


def test_wrong_row_count_is_an_error_for_the_callers() -> None:
    batcher = QueryBatcher(lambda texts: texts[:-1], max_wait_ms=1.0, max_batch=4)
    with pytest.raises(RuntimeError, match="returned 1 rows for 2 texts"):
        batcher(["a", "b"])


def test_close_answers_waiting_callers_and_refuses_new_ones() -> None:
    encode = Recorder()
    encode.gate.clear()
    batcher = QueryBatcher(encode, max_wait_ms=1.0, max_batch=2)
    results: dict[str, list[str]] = {}

    def caller(text: str) -> None:
        results[text] = batcher([text])

    threads = [threading.Thread(target=caller, args=(f"q{i}",)) for i in range(6)]
    threads[0].start()
    assert encode.entered.wait(JOIN_S)
    for thread in threads[1:]:
        thread.start()
    _wait_until(lambda: len(batcher._queue) == 5)
    batcher.close()
    with pytest.raises(BatcherClosedError):
        batcher(["late"])
    encode.gate.set()
    for thread in threads:
        thread.join(JOIN_S)
        assert not thread.is_alive()
    assert results == {f"q{i}": [f"q{i}"[::-1]] for i in range(6)}
    assert [len(call) for call in encode.calls] == [1, 2, 2, 1]  # max_batch still holds


def test_an_interrupted_waiter_leaves_the_queue_and_passes_on_the_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrieval_assets.core.embed import batching

    class Interrupted(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            super().wait(timeout)
            raise KeyboardInterrupt

    class Request(batching._Request):
        def __init__(self, texts: list[str]) -> None:
            super().__init__(texts)
            if texts == ["interrupted"]:
                self.ready = Interrupted()

    monkeypatch.setattr(batching, "_Request", Request)
    encode = Recorder()
    encode.gate.clear()
    batcher = QueryBatcher(encode, max_wait_ms=1.0, max_batch=1)  # one request per call
    outcomes: dict[str, object] = {}

    caller = _recording(batcher, outcomes, KeyboardInterrupt)

    first = threading.Thread(target=caller, args=("first",))
    first.start()
    assert encode.entered.wait(JOIN_S)
    # "interrupted" queues next, so the lead passes to it; it is interrupted as it is woken
    threads = [threading.Thread(target=caller, args=(text,)) for text in ("interrupted", "after")]
    threads[0].start()
    _wait_until(lambda: len(batcher._queue) == 1)
    threads[1].start()
    _wait_until(lambda: len(batcher._queue) == 2)
    encode.gate.set()
    for thread in (first, *threads):
        thread.join(JOIN_S)
        assert not thread.is_alive(), "a caller hung"
    assert isinstance(outcomes["interrupted"], KeyboardInterrupt)
    assert outcomes["first"] == ["tsrif"] and outcomes["after"] == ["retfa"]
    assert encode.calls == [["first"], ["after"]]
    assert batcher(["again"]) == ["niaga"] and not batcher._leading


def test_a_leader_interrupted_while_gathering_passes_on_the_lead() -> None:
    encode = Recorder()
    batcher = QueryBatcher(encode, max_wait_ms=10_000, max_batch=8)
    batcher._company_at = time.monotonic()  # the leader will gather
    interrupted = threading.Event()
    original_wait = batcher._arrival.wait

    def wait(timeout: float | None = None) -> bool:
        if threading.current_thread().name == "leader" and not interrupted.is_set():
            original_wait(0.05)
            interrupted.set()
            batcher._company_at = float("-inf")  # the follower, leading next, goes at once
            raise KeyboardInterrupt
        return original_wait(timeout)

    batcher._arrival.wait = wait  # type: ignore[method-assign]
    outcomes: dict[str, object] = {}

    caller = _recording(batcher, outcomes, KeyboardInterrupt)

    leader = threading.Thread(target=caller, args=("lead",), name="leader")
    leader.start()
    _wait_until(lambda: batcher._leading)
    follower = threading.Thread(target=caller, args=("follow",))
    follower.start()
    for thread in (leader, follower):
        thread.join(JOIN_S)
        assert not thread.is_alive(), "a caller hung"
    assert isinstance(outcomes["lead"], KeyboardInterrupt) and outcomes["follow"] == ["wollof"]
    assert encode.calls == [["follow"]] and not batcher._leading


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        QueryBatcher(Recorder(), max_wait_ms=-1, max_batch=4)
    with pytest.raises(ValueError):
        QueryBatcher(Recorder(), max_wait_ms=1, max_batch=0)
    with pytest.raises(ValueError):
        QueryBatchingSettings(max_wait_ms=-1)


# --- encoders --------------------------------------------------------------------------------


class FakeDense(DenseEncoder):
    model_name = "fake"
    dim = 4
    max_length = 128

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        return self.encode_queries(texts)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32).reshape(len(texts), 4)


class FakeSparse(SparseEncoder):
    model_name = "fake-sparse"
    vocab_size = 10

    def encode_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> list:
        return self.encode_queries(texts)

    def encode_queries(self, texts: Sequence[str]) -> list:
        from retrieval_assets.core.models import SparseVector

        return [SparseVector(indices=[len(t) % 10], values=[1.0]) for t in texts]

    def id_to_term(self, term_id: int) -> str:
        return f"t{term_id}"


def test_zero_wait_means_the_plain_encoder() -> None:
    dense, sparse = FakeDense(), FakeSparse()
    assert batching_dense_encoder(dense, max_wait_ms=0, max_batch=16) is dense
    assert batching_sparse_encoder(sparse, max_wait_ms=0, max_batch=16) is sparse
    wrapped = batching_dense_encoder(dense, max_wait_ms=2, max_batch=16)
    assert isinstance(wrapped, BatchingDenseEncoder) and wrapped.inner is dense
    assert batching_dense_encoder(wrapped, max_wait_ms=2, max_batch=16) is wrapped  # never twice
    assert (wrapped.model_name, wrapped.dim, wrapped.max_length) == ("fake", 4, 128)
    np.testing.assert_array_equal(wrapped.encode_queries(["ab", "abc"]), dense.encode_queries(["ab", "abc"]))
    assert wrapped.encode_queries([]).shape == (0, 4)
    sparse_wrapped = batching_sparse_encoder(sparse, max_wait_ms=2, max_batch=16)
    assert isinstance(sparse_wrapped, BatchingSparseEncoder)
    assert sparse_wrapped.encode_queries(["abc"]) == sparse.encode_queries(["abc"])
    assert sparse_wrapped.id_to_term(3) == "t3" and sparse_wrapped.vocab_size == 10


def test_retrieval_settings_default_and_resource_round_trip() -> None:
    from retrieval_assets.defs.resources import (
        IndexStorageResource,
        ModelResource,
        QueryBatchingConfig,
        SearchResource,
    )

    assert RetrievalSettings().query_batching == QueryBatchingSettings(max_wait_ms=1.0, max_batch=8)
    resource = SearchResource(
        storage=IndexStorageResource(home="/nonexistent"),
        models=ModelResource(),
        query_batching=QueryBatchingConfig(max_wait_ms=0.5, max_batch=4),
    )
    settings = resource.retrieval_settings().query_batching
    assert (settings.max_wait_ms, settings.max_batch) == (0.5, 4)
    off = SearchResource(
        storage=IndexStorageResource(home="/nonexistent"),
        models=ModelResource(),
        query_batching=QueryBatchingConfig(max_wait_ms=0),
    )
    assert off.retrieval_settings().query_batching.max_wait_ms == 0


# --- real models -----------------------------------------------------------------------------

QUERIES = [
    "treatment of diabetes with insulin",
    "gene expression in tumour cells",
    "a red cat",
    "does vitamin D supplementation reduce the risk of fractures in elderly women",
    "BRCA1",
    "effects of microplastics on marine invertebrate larvae development",
    "a blue dog",
    "statins and muscle pain",
]


@pytest.fixture(scope="module")
def splade() -> SparseEncoder:
    return load_sparse_encoder("splade-tiny", device="cpu")


def _concurrently(encode, texts: Sequence[str], repeats: int = 3) -> dict[str, list]:  # type: ignore[no-untyped-def]
    got: dict[str, list] = {text: [] for text in texts}
    start = threading.Barrier(len(texts))

    def caller(text: str) -> None:
        start.wait()
        for _ in range(repeats):
            got[text].append(encode([text])[0])

    _run_threads([threading.Thread(target=caller, args=(text,)) for text in texts])
    return got


def test_splade_batched_weights_equal_unbatched(splade: SparseEncoder) -> None:
    batching = batching_sparse_encoder(splade, max_wait_ms=5.0, max_batch=8)
    assert isinstance(batching, BatchingSparseEncoder)
    alone = {text: splade.encode_queries([text])[0] for text in QUERIES}
    got = _concurrently(batching.encode_queries, QUERIES)
    assert batching.batcher.calls < len(QUERIES) * 3  # some calls were shared
    for text, vectors in got.items():
        for vector in vectors:
            assert vector.indices == alone[text].indices
            np.testing.assert_allclose(vector.values, alone[text].values, atol=1e-5)


def test_splade_head_on_real_tokens_equals_the_padded_head(splade: SparseEncoder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from retrieval_assets.core.embed import sparse as sparse_module

    split = splade.encode_queries(QUERIES)
    monkeypatch.setattr(sparse_module, "_mlm_head", lambda model: None)
    padded = splade.encode_queries(QUERIES)
    for a, b in zip(split, padded, strict=True):
        assert a.indices == b.indices
        np.testing.assert_allclose(a.values, b.values, atol=1e-5)


def test_int8_onnx_queries_are_not_batched_and_exact_ones_are() -> None:
    int8 = load_dense_encoder("BAAI/bge-small-en-v1.5-int8", device="cpu")
    assert batching_dense_encoder(int8, max_wait_ms=2.0, max_batch=16) is int8  # vectors would move
    bge = load_dense_encoder("BAAI/bge-small-en-v1.5", device="cpu")
    # Exact, but on CPU a shared call saves nothing and holds the queries to one thread.
    assert bge.query_batches_exact and batching_dense_encoder(bge, max_wait_ms=5.0, max_batch=8) is bge
    bge.query_batching_pays = True  # as on a GPU
    batching_bge = batching_dense_encoder(bge, max_wait_ms=5.0, max_batch=8)
    assert isinstance(batching_bge, BatchingDenseEncoder)
    exact_alone = {text: bge.encode_queries([text])[0] for text in QUERIES}
    for text, vectors in _concurrently(batching_bge.encode_queries, QUERIES).items():
        assert all(np.array_equal(vector, exact_alone[text]) for vector in vectors)  # bit for bit
    minilm = load_dense_encoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    batching = batching_dense_encoder(minilm, max_wait_ms=5.0, max_batch=8)
    assert isinstance(batching, BatchingDenseEncoder)
    alone = {text: minilm.encode_queries([text])[0] for text in QUERIES}
    got = _concurrently(batching.encode_queries, QUERIES)
    for text, vectors in got.items():
        for vector in vectors:
            assert float(vector @ alone[text]) > 0.99999
