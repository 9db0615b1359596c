"""Files written whole or not at all: a reader, or a run after a crash, sees the old file or
the new one, never half of one; and sparse files copied without filling their holes."""

from __future__ import annotations

import errno
import json
import os
import shutil
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


def copy_keeping_holes(source: str, target: str) -> None:
    """Copy a file's data extents only: qdrant's memory-mapped storage is preallocated and mostly
    holes, which a plain copy writes out (a 505 MB ACL shard became 819 MB). Falls back to a
    plain copy where the system cannot seek holes or copy ranges in the kernel."""
    try:
        with open(source, "rb") as reader, open(target, "wb") as writer:
            size = os.fstat(reader.fileno()).st_size
            offset = 0
            while offset < size:
                try:
                    start = os.lseek(reader.fileno(), offset, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:  # ENXIO: nothing but a hole is left
                        raise
                    break
                offset = os.lseek(reader.fileno(), start, os.SEEK_HOLE)
                while start < offset:
                    start += os.copy_file_range(reader.fileno(), writer.fileno(), offset - start, start, start)
            writer.truncate(size)
    except (AttributeError, OSError):
        shutil.copy2(source, target)
        return
    shutil.copystat(source, target)


def link_or_copy(source: Path, target: Path) -> None:
    """``source`` also at ``target`` (a file a new version keeps from an older one, which no
    writer changes): a hard link, else (another file system) a copy; nothing if ``target`` is
    there already."""
    if target.exists():
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
