"""LLM questions against a real OpenAI-shaped HTTP server on loopback, failures falling back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pandas as pd
import pytest

from retrieval_assets.core.evaluation.gold.known_item import generate_known_item_gold
from retrieval_assets.core.evaluation.gold.llm import generate_llm_questions, with_llm_questions
from retrieval_assets_tests.core.evaluation.gold.corpus import documents


class _ChatHandler(BaseHTTPRequestHandler):
    """Answers ``/v1/chat/completions``: a 500 for documents containing FAIL500, a late answer for SLOW."""

    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        document = body["messages"][-1]["content"]
        if "FAIL500" in document:
            self.send_error(500, "model crashed")
            return
        if "SLOW" in document:
            time.sleep(1.0)
        content = f'"Which text is {document.split()[0]}?"\n'  # quoted and on a line: answers come like this
        answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        payload = json.dumps(answer).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            pass

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


@pytest.fixture
def base_url() -> Iterator[str]:
    _ChatHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_one_question_per_document(base_url: str) -> None:
    sample = pd.DataFrame({"query_id": ["q1", "q2"], "title": ["Alpha", None], "text": ["first text", "beta text"]})
    questions, failures = generate_llm_questions(sample, base_url, model="tiny", api_key="secret")
    assert questions == {"q1": "Which text is Alpha?", "q2": "Which text is beta?"} and failures == []
    first = _ChatHandler.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer secret"
    assert first["model"] == "tiny" and first["temperature"] == 0
    assert first["messages"][-1]["content"] == "Alpha\n\nfirst text"


def test_failed_questions_keep_the_known_item_query(base_url: str) -> None:
    frame = documents({"a": 6})
    frame.loc[1, "text"] += " FAIL500"
    frame.loc[2, "text"] += " SLOW"
    gold = generate_known_item_gold(frame, size=6, min_size=1, title_share=0.0, created_at="t")
    by_doc = {doc: qid for qid, doc in gold.query_doc.items()}
    updated = with_llm_questions(gold, frame, base_url, model="tiny", timeout=0.3)
    failed = {by_doc["a-0001"], by_doc["a-0002"]}
    for qid, query in updated.queries.items():
        if qid in failed:
            assert query == gold.queries[qid] and updated.query_source[qid] == "terms"
        else:
            assert query.startswith("Which text is") and updated.query_source[qid] == "llm"
    assert updated.kind == "llm" and updated.stats["llm_questions"] == 4 and updated.stats["llm_failures"] == 2
    assert any("500" in w and by_doc["a-0001"] in w for w in updated.warnings)
    assert any("Timeout" in w and by_doc["a-0002"] in w for w in updated.warnings)
    assert updated.qrels == gold.qrels and updated.fingerprint != gold.fingerprint


def test_a_failing_server_is_not_asked_for_every_document(base_url: str) -> None:
    sample = pd.DataFrame({"query_id": ["q1", "q2", "q3"], "title": "", "text": ["FAIL500 a", "FAIL500 b", "ok c"]})
    questions, failures = generate_llm_questions(sample, base_url, model="tiny", max_consecutive_failures=2)
    assert questions == {} and len(_ChatHandler.requests) == 2
    assert failures[2] == "q3: not asked after 2 failures in a row"
