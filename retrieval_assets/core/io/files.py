"""Files written whole or not at all: a reader, or a run after a crash, sees the old file or
the new one, never half of one."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomically(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """``write`` fills a temporary file beside ``path`` (named per process, so concurrent
    writers never share one), which is flushed to disk and renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    descriptor = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(tmp, path)  # atomic on POSIX
    return path


def write_json(data: Any, path: str | os.PathLike[str]) -> Path:
    return write_atomically(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, sort_keys=True)))
