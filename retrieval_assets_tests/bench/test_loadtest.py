"""The load test's client (serving/loadtest.py) against small stdlib servers: each search is sent
once, keep-alive connections survive the server closing them while idle, and failures are counted,
not raised."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from retrieval_assets.bench.loadtest import Connection, run_level


class _Answering(BaseHTTPRequestHandler):
    """Answers every POST 200 over one HTTP/1.1 keep-alive connection, recording the bodies."""

    protocol_version = "HTTP/1.1"
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


class _ClosingWhenIdle(_Answering):
    """Closes the connection after each answer without saying so, as a server does when its
    keep-alive timeout passes; ``closed`` is set once it has."""

    closed = threading.Event()

    def do_POST(self) -> None:
        super().do_POST()
        self.close_connection = True

    def finish(self) -> None:
        super().finish()
        self.connection.close()
        self.closed.set()


@contextmanager
def _serving(handler: type[_Answering]) -> Iterator[str]:
    handler.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prefix/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_connection_the_server_closed_while_idle_is_reopened() -> None:
    _ClosingWhenIdle.closed.clear()
    with _serving(_ClosingWhenIdle) as url:
        connection = Connection(url)
        try:
            assert connection.request("POST", "/search", b'{"query": "a"}') == (200, b'{"path": "/prefix/search"}')
            assert _ClosingWhenIdle.closed.wait(5)
            assert connection.request("POST", "/search", b'{"query": "b"}')[0] == 200
        finally:
            connection.close()
    assert _ClosingWhenIdle.bodies == [b'{"query": "a"}', b'{"query": "b"}']


def test_a_level_sends_each_search_once_and_counts_failures() -> None:
    with _serving(_Answering) as url:
        figures = run_level(url, 2, 6, ["x"], max_seconds=10, top_k=3)
    # Three warm-up searches, then the six measured ones.
    assert _Answering.bodies == [b'{"query": "x", "top_k": 3}'] * 9
    assert figures["requests"] == 6 and figures["errors"] == 0 and figures["client_cpu_ms_per_request"] > 0
    assert figures["server_cpu_ms_per_request"] is None  # no GET /metrics here (501)
    unreachable = run_level(f"http://127.0.0.1:{_closed_port()}", 1, 2, ["x"], max_seconds=10, timeout_s=2)
    assert unreachable["requests"] == 2 and unreachable["errors"] == 2
    assert unreachable["error_examples"][0].startswith("ConnectionRefusedError")


def _closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Connection("ftp://example.org/")
