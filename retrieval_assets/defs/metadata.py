"""Shared helpers for asset metadata and run-log progress."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pandas as pd
from dagster import AssetExecutionContext, MetadataValue

from retrieval_assets.core.embed.base import ProgressCallback

_PREVIEW_CHARS = 120


def preview(frame: pd.DataFrame, columns: Sequence[str], rows: int = 5) -> MetadataValue:
    """A markdown table of the first rows, long cells shortened."""
    head = frame.loc[:, list(columns)].head(rows).copy()
    for column in head.columns:
        head[column] = head[column].map(lambda v: _shorten(str(v)))
    return MetadataValue.md(head.to_markdown(index=False) if len(head) else "_(empty)_")


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"


def log_progress(context: AssetExecutionContext, label: str, every_percent: int = 10) -> ProgressCallback:
    """A progress callback that writes a run-log line each time another ``every_percent`` is done."""
    next_mark = [every_percent]
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent >= next_mark[0] or done == total:
            rate = done / max(time.perf_counter() - started, 1e-9)
            context.log.info(f"{label}: {done}/{total} ({percent}%), {rate:.1f}/s")
            next_mark[0] = (percent // every_percent + 1) * every_percent

    return report


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """Yields a dict whose ``seconds`` is filled in when the block ends."""
    elapsed: dict[str, float] = {}
    started = time.perf_counter()
    try:
        yield elapsed
    finally:
        elapsed["seconds"] = round(time.perf_counter() - started, 3)
