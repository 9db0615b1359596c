"""``retrieval-assets bench-document-writes``: the server CPU one ``POST /documents`` costs per record.

Posts ``records`` documents in one request, ``repeat`` times, to a served API and reads the
server's own CPU seconds (``process_cpu_seconds_total`` from ``GET /metrics``: no keys, or a key
with the admin scope) before and after each post. The records are queued in that server's
inbox for its next build, so point it at a scratch home. Records come from a JSON Lines file in
the server's catalog format (ids replaced by fresh ones, the file cycled when short), or are
made up: BEIR-style abstracts of about 200 words.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from retrieval_assets.bench.loadtest import Connection, client_headers, server_counters
from retrieval_assets.bench.report import emit_figures

ID_FIELDS = ("_id", "id")
_WORDS = (
    "patients cohort randomized trial insulin resistance expression protein cells mice tumour growth "
    "signalling pathway receptor binding mutation variant genome sequencing reads alignment model "
    "measured increased reduced associated risk outcome treatment dose response analysis network"
).split()


def made_up_records(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """BEIR-style records of a title and about 200 words of text."""
    rng = random.Random(seed)
    return [
        {
            "_id": str(n),
            "title": " ".join(rng.choices(_WORDS, k=8)).capitalize(),
            "text": ". ".join(" ".join(rng.choices(_WORDS, k=20)).capitalize() for _ in range(10)) + ".",
        }
        for n in range(count)
    ]


def records_from(path: str | Path, count: int) -> list[dict[str, Any]]:
    """``count`` records of the JSON Lines file at ``path``, cycled when it holds fewer."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path} holds no records")
    return [json.loads(lines[n % len(lines)]) for n in range(count)]


def with_fresh_ids(records: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    fresh = []
    for n, record in enumerate(records):
        field = next((name for name in ID_FIELDS if name in record), "_id")
        fresh.append({**record, field: f"{prefix}-{n}"})
    return fresh


def measure_document_writes(
    url: str, records: list[dict[str, Any]], repeat: int, tenant: str | None, headers: dict[str, str]
) -> dict[str, Any]:
    """Each post's wall time and the server's CPU seconds for it, per record."""
    connection = Connection(url, headers, timeout_s=600.0)
    query = f"?tenant={tenant}" if tenant else ""
    posts: list[dict[str, float | None]] = []
    try:
        for attempt in range(repeat):
            body = json.dumps(with_fresh_ids(records, f"bench-write-{uuid.uuid4().hex[:8]}-{attempt}")).encode()
            before = server_counters(connection).get("cpu")
            started = time.perf_counter()
            status, answer = connection.request("POST", f"/documents{query}", body)
            wall = time.perf_counter() - started
            if status != 202:
                raise RuntimeError(f"POST /documents answered {status}: {answer[:500]!r}")
            after = server_counters(connection).get("cpu")
            cpu = None if before is None or after is None else after - before
            posts.append({"wall_s": round(wall, 3), "server_cpu_s": None if cpu is None else round(cpu, 4)})
    finally:
        connection.close()
    cpus: list[float] = [post["server_cpu_s"] for post in posts if post["server_cpu_s"] is not None]
    per_record = statistics.median(cpus) * 1000 / len(records) if cpus else None
    return {
        "url": url,
        "records_per_post": len(records),
        "body_bytes": len(json.dumps(records)),
        "posts": posts,
        "median_wall_s": statistics.median(float(post["wall_s"] or 0.0) for post in posts),
        "server_cpu_ms_per_record": None if per_record is None else round(per_record, 3),
    }


def bench_document_writes(
    url: str, records: int, repeat: int, corpus: str | None, tenant: str | None, json_out: str | None
) -> int:
    """Post ``records`` documents ``repeat`` times; the last stdout line is the JSON figures."""
    try:
        sample = records_from(corpus, records) if corpus else made_up_records(records)
        figures = measure_document_writes(url, sample, repeat, tenant, client_headers())
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"bench-document-writes: {exc}", file=sys.stderr)
        return 2
    if figures["server_cpu_ms_per_record"] is None:
        print("bench-document-writes: GET /metrics was refused: no server CPU (use an admin key)", file=sys.stderr)
    emit_figures(figures, json_out)
    return 0
