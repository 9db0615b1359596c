"""Memory that a step freed goes back to the operating system before the next step loads its
inputs (a build runs its steps in one process)."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest

from retrieval_assets.core.io.memory import return_freed_memory


def _resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc's malloc_trim")
def test_freed_blocks_between_kept_ones_go_back_to_the_system() -> None:
    # 300 MB of 1 KB blocks (past Python's small-object allocator, so from malloc); one in 64 kept
    # pins the heap, so the freed ones are returned only by malloc_trim.
    blocks = [bytes(1000) + bytes([n % 256]) for n in range(300_000)]
    kept = blocks[::64]
    del blocks
    held = _resident_mb()
    return_freed_memory()
    assert held - _resident_mb() > 150
    assert len(kept) == 4688


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_the_process_held_first_is_frozen_once_and_later_cycles_are_still_collected() -> None:
    return_freed_memory()  # the first call in this process, or a later one: either way frozen once
    frozen = gc.get_freeze_count()
    assert frozen > 0
    one, two = _Node(), _Node()
    one.other, two.other = two, one  # a cycle made after the freeze, dropped below
    alive = weakref.ref(one)
    del one, two
    return_freed_memory()
    assert alive() is None  # collected: step data is not frozen
    assert gc.get_freeze_count() == frozen
