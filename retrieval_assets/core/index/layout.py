"""Where the indexes of one version live, and the build manifest each index directory carries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval_assets.core.io.files import write_json

BUILD_MANIFEST = "build.json"


@dataclass(frozen=True)
class IndexLayout:
    """Where the embedded indexes of one build live."""

    root: Path

    @property
    def faiss(self) -> Path:
        return self.root / "faiss"

    @property
    def qdrant(self) -> Path:
        return self.root / "qdrant"

    @property
    def lexical(self) -> Path:
        return self.root / "tantivy"

    @property
    def vocabulary(self) -> Path:
        return self.root / "vocabulary.parquet"

    @property
    def graph(self) -> Path:
        return self.root / "graph.parquet"

    @property
    def vocabulary_counts(self) -> Path:
        """Every term's document counts, kept ones or not: what a delta build updates."""
        return self.root / "vocabulary_counts.parquet"

    @property
    def chunks(self) -> Path:
        """The chunk ids, documents and row hashes of a version, written when it is named: what
        its seal checks and, once sealed, what a delta diffs against."""
        return self.root / "chunks.parquet"

    @property
    def delta_plan(self) -> Path:
        """The plan of a candidate built as a delta from another version (``delta.DeltaPlan``)."""
        return self.root / "delta.json"

    @property
    def delta_chunks(self) -> Path:
        """A delta candidate's chunk rows of the documents it changes, which its index steps
        write: set aside once, not found again among every chunk by each step."""
        return self.root / "delta_chunks.parquet"


def write_build_manifest(path: Path, **facts: object) -> None:
    write_json(facts, path / BUILD_MANIFEST)


def read_build_manifest(path: Path) -> dict[str, Any]:
    manifest = path / BUILD_MANIFEST
    return json.loads(manifest.read_text()) if manifest.is_file() else {}
