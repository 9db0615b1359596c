"""Files: sparse files copied without filling their holes."""

from __future__ import annotations

from pathlib import Path

from retrieval_assets.core.io.files import copy_keeping_holes


def test_copies_keep_the_holes_of_sparse_files(tmp_path: Path) -> None:
    source, target = tmp_path / "mapped.bin", tmp_path / "copy.bin"
    with source.open("wb") as handle:  # 64 MiB, of which two 4 KiB blocks hold data
        handle.write(b"head" * 1024)
        handle.seek(32 << 20)
        handle.write(b"tail" * 1024)
        handle.truncate(64 << 20)
    copy_keeping_holes(str(source), str(target))
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_blocks * 512 <= source.stat().st_blocks * 512 + (1 << 20) < (8 << 20)
