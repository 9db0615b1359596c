"""Loading raw catalog rows and BEIR gold sets from disk.

Readers stream files line by line in binary so that one bad byte sequence or one
malformed line never stops a load: every input line, blank ones included, becomes a
``RawRow`` and cleaning (``retrieval_assets.core.ingest.cleaning``) decides whether it is kept or
quarantined, so ``lines in == kept + quarantined`` holds.
"""

from __future__ import annotations

import codecs
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

CatalogFormat = Literal["tool_catalog", "beir"]
# A source is a catalog file in one of those formats, the document inbox (``inbox.py``), whose
# entries carry their own format and tenant, or one of the kinds in ``sources``: a folder of files,
# a table, the ACL Anthology's data directory.
SourceFormat = Literal["tool_catalog", "beir", "inbox", "files", "table", "acl_anthology"]
DEFAULT_MAX_FILE_BYTES = 64 * 2**20


class CatalogError(ValueError):
    """A catalog or gold file that is missing or cannot be parsed."""


class RawRow(BaseModel):
    """One input line, decoded but not parsed."""

    model_config = ConfigDict(frozen=True)

    source: str
    line_number: int  # 1-based
    raw: str
    utf8_error: bool = False  # the bytes were not valid UTF-8; ``raw`` holds a lossy decode


class ColumnMapping(BaseModel):
    """Which columns of a table hold a document's fields; unset ones are found by name
    (``sources.table``)."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    title: str | None = None
    text: str | None = None
    tenant: str | None = None
    # Columns kept as metadata; None: every other column with scalar or list-of-scalar values.
    metadata: tuple[str, ...] | None = None


class CatalogSource(BaseModel):
    """Where a catalog lives and how to read it.

    ``path`` is a ``.jsonl``/``.jsonl.gz`` file for ``tool_catalog``, a BEIR directory
    (holding ``corpus.jsonl`` or ``corpus.jsonl.gz``) for ``beir``, the inbox directory for
    ``inbox``, a folder for ``files``, a Parquet/CSV/JSON Lines file or a folder of Parquet files
    for ``table``, and the Anthology's ``data/`` directory (or the folder above it) for
    ``acl_anthology``.
    """

    model_config = ConfigDict(frozen=True)

    format: SourceFormat
    path: str
    tenant_id: str = "default"
    # files: which paths under the folder are read (globs relative to it; ``**`` spans folders)
    include: tuple[str, ...] = ("**/*",)
    exclude: tuple[str, ...] = ()
    # files: larger files are quarantined as file_too_large without being read
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    # table: which columns hold what
    columns: ColumnMapping = ColumnMapping()


class GoldSet(BaseModel):
    """Judged queries of one BEIR split: only queries that have qrels are included."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def read_raw_rows(path: str | Path) -> Iterator[RawRow]:
    """Stream the lines of a ``.jsonl`` or ``.jsonl.gz`` file as ``RawRow`` objects.

    Line terminators are removed; blank lines are yielded with ``raw`` empty (cleaning
    quarantines them as ``blank_line``) so no input line disappears silently. A missing
    file is reported here, at call time, rather than at the first iteration.
    """
    blocks = read_line_blocks(path)
    return (
        RawRow(source=str(path), line_number=number, raw=text, utf8_error=error)
        for block in blocks
        for number, text, error in zip(
            block.line_numbers.tolist(), block.texts.to_pylist(), block.utf8_errors.tolist(), strict=True
        )
    )


@dataclass(frozen=True)
class LineBlock:
    """Consecutive lines of a JSON Lines file: their 1-based numbers, their text without line
    terminators, and which were not valid UTF-8 (their text is a lossy decode)."""

    line_numbers: np.ndarray
    texts: pa.StringArray
    utf8_errors: np.ndarray


# Bytes of a JSON Lines file read at once. Each block's lines become Arrow strings in a few
# array operations: a 1M-line catalog made RawRow objects, then columns, in about 10 s.
LINE_BLOCK_BYTES = 64 * 2**20


def read_line_blocks(path: str | Path, block_bytes: int = LINE_BLOCK_BYTES) -> Iterator[LineBlock]:
    """The lines of a ``.jsonl`` or ``.jsonl.gz`` file, a block at a time (``read_raw_rows``'
    rules: every line, blank ones included, with its terminator and a leading byte-order mark
    removed). A missing file is reported at call time."""
    path = Path(path)
    if not path.is_file():
        raise CatalogError(f"catalog file not found: {path}")
    return _line_blocks(path, block_bytes)


def _line_blocks(path: Path, block_bytes: int) -> Iterator[LineBlock]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        # A UTF-8 byte-order mark would otherwise make the first record malformed JSON.
        rest, numbered = handle.read(len(codecs.BOM_UTF8)).removeprefix(codecs.BOM_UTF8), 0
        while block := handle.read(block_bytes):
            data = rest + block
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                lines = _lines(data[:cut], numbered)
                numbered += len(lines.texts)
                yield lines
        if rest:
            yield _lines(rest + b"\n", numbered)


# Lines at least this long on average are found by searching for each newline; shorter ones
# by comparing every byte at once.
SEARCHED_LINE_BYTES = 64


def _newlines(data: bytes) -> np.ndarray:
    """The positions of the newlines in ``data``. Searching from one to the next (memchr) took
    9 ms for a 64 MB block of 1.2 KB lines, where comparing every byte took 98 ms; for short
    lines, a search per line costs more than the comparison."""
    count = data.count(b"\n")
    if count * SEARCHED_LINE_BYTES > len(data):
        return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))

    def positions() -> Iterator[int]:
        found = data.find(b"\n")
        while found >= 0:
            yield found
            found = data.find(b"\n", found + 1)

    return np.fromiter(positions(), dtype=np.int64, count=count)


def _lines(data: bytes, numbered: int) -> LineBlock:
    """The lines of ``data``, which ends with a newline, numbered after ``numbered``."""
    ends = _newlines(data)
    offsets = pa.array(np.concatenate(([0], ends + 1)).astype(np.int64)).buffers()[1]
    raw = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(ends), [None, offsets, pa.py_buffer(data)])
    numbers = np.arange(numbered + 1, numbered + len(ends) + 1, dtype=np.int64)
    try:
        texts = pc.utf8_rtrim(raw.cast(pa.large_string()), characters="\r\n")
        return LineBlock(numbers, texts, np.zeros(len(ends), dtype=bool))
    except pa.ArrowInvalid:  # not all UTF-8: decode line by line, flagging the lines that are not
        decoded = [_decoded(line.rstrip(b"\r\n")) for line in raw.to_pylist()]
        return LineBlock(
            numbers,
            pa.array([text for text, _ in decoded], type=pa.large_string()),
            np.array([error for _, error in decoded], dtype=bool),
        )


def _decoded(line: bytes) -> tuple[str, bool]:
    try:
        return line.decode("utf-8"), False
    except UnicodeDecodeError:
        return line.decode("utf-8", errors="replace"), True


def _beir_file(beir_dir: Path, stem: str) -> Path:
    """``stem`` or ``stem.gz`` inside a BEIR directory, with a clear error when neither exists."""
    for candidate in (beir_dir / stem, beir_dir / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise CatalogError(f"BEIR directory {beir_dir} has no {stem} (or {stem}.gz)")


def catalog_file(path: str | Path, catalog_format: str) -> Path:
    """The JSONL file holding a catalog's records: a BEIR directory's corpus, or the file itself."""
    path = Path(path)
    if catalog_format == "beir":
        return _beir_file(path, "corpus.jsonl")
    if not path.is_file():
        raise CatalogError(f"catalog file not found: {path}")
    return path


def load_raw_rows(source: CatalogSource) -> Iterator[RawRow]:
    """Raw rows of a catalog source, whatever its format."""
    return read_raw_rows(catalog_file(source.path, source.format))


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Parse a BEIR qrels TSV (``query-id  corpus-id  score``, optional header)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if line_number == 1 and fields[0] == "query-id":
                continue
            if len(fields) != 3:
                raise CatalogError(f"{path}:{line_number}: expected 3 columns (query-id corpus-id score), got {line!r}")
            qid, doc_id, score = fields
            try:
                qrels.setdefault(qid, {})[doc_id] = int(score)
            except ValueError:
                raise CatalogError(f"{path}:{line_number}: score {score!r} is not an integer") from None
    return qrels


def load_gold(beir_dir: str | Path, split: str = "test") -> GoldSet:
    """Queries and relevance judgements of one BEIR split.

    Queries are returned in qrels order; a qrels query id missing from ``queries.jsonl``
    is an error because it would silently shrink the evaluation set.
    """
    beir_dir = Path(beir_dir)
    qrels_path = beir_dir / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise CatalogError(f"qrels file not found: {qrels_path}")
    qrels = _read_qrels(qrels_path)

    texts: dict[str, str] = {}
    for row in read_raw_rows(_beir_file(beir_dir, "queries.jsonl")):
        if not row.raw.strip():
            continue
        try:
            record = json.loads(row.raw)
            qid, text = str(record["_id"]), record["text"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CatalogError(f"{row.source}:{row.line_number}: malformed query line ({exc})") from None
        if qid in qrels:
            texts[qid] = text

    missing = [qid for qid in qrels if qid not in texts]
    if missing:
        raise CatalogError(
            f"{qrels_path}: {len(missing)} judged queries missing from queries.jsonl, e.g. {missing[:5]}"
        )
    return GoldSet(queries={qid: texts[qid] for qid in qrels}, qrels=qrels)


def source_name(path: str | Path) -> str:
    """A catalog's name: its directory or file name without its format's suffixes."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".ndjson", ".parquet", ".csv", ".tsv"):
        name = name.removesuffix(suffix)
    return name
