"""How every bench reports: its figures with the machine as the last stdout line, progress bars, peak memory."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from retrieval_assets.core.embed.base import ProgressCallback


def machine() -> dict[str, object]:
    """The CPU beside every figure: INT8 models run 2-3x slower without AVX-512 VNNI."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": model, "avx512_vnni": "avx512_vnni" in flags, "cores": os.cpu_count()}


def emit_figures(figures: dict[str, Any], json_out: str | None) -> None:
    """Benchmark figures, with the machine, as the last stdout line (and to ``json_out``)."""
    line = json.dumps({**figures, "machine": machine()})
    if json_out:
        Path(json_out).write_text(line + "\n")
    print(line)


def peak_rss_mb() -> float:
    """This process's peak resident memory. Linux's ``VmHWM`` starts afresh in a spawned child,
    where ``ru_maxrss`` carries the parent's peak at the fork over."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def tqdm_progress(label: str) -> ProgressCallback:
    """A progress bar on stderr for ``label``, closed when done (stdout keeps only the figures)."""
    from tqdm import tqdm

    bar: dict[str, tqdm[Any]] = {}

    def report(done: int, total: int) -> None:
        if label not in bar:
            bar[label] = tqdm(total=total, desc=label, unit="item", file=sys.stderr, leave=False)
        bar[label].update(done - bar[label].n)
        if done >= total:
            bar[label].close()

    return report


@contextmanager
def scratch_dir(requested: str | None, prefix: str) -> Iterator[Path]:
    """``requested`` (kept afterwards), or a temporary directory removed at the end."""
    if requested:
        yield Path(requested)
        return
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
