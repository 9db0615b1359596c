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



def write_build_manifest(path: Path, **facts: object) -> None:
    write_json(facts, path / BUILD_MANIFEST)


def read_build_manifest(path: Path) -> dict[str, Any]:
    manifest = path / BUILD_MANIFEST
    return json.loads(manifest.read_text()) if manifest.is_file() else {}
