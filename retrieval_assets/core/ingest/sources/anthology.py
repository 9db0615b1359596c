"""The ``acl_anthology`` source kind: the ACL Anthology's own ``data/`` directory, one document per
paper abstract.

``path`` is the data directory (holding ``xml/``, one file per collection, and ``yaml/``) or a
folder holding ``data/``. It is read with the ``acl-anthology`` library, version 0.5.4 (1.x refuses
snapshots with local URLs), installed with ``pip install --no-deps``: it declares ``app-paths``,
whose ``aiopath`` pins ``anyio<4`` against FastAPI, and never imports it. The library is imported on
first use, so the other source kinds work without it.

Per paper, in collection-file, volume and paper order:

* id: the full Anthology id (``2020.acl-main.1``, ``P19-1001``), as the library builds it from the
  XML's collection, volume and paper ids (the JSON Lines export differs for 4 papers of a 2025
  snapshot: it takes the PDF name, ``<url>``, where that differs from the built id, and builds
  ``W09-9006`` for paper 6 of volume 9 of W09, which has no PDF, where the library has ``W09-0906``);
* title and text: the title and the abstract as plain text: the XML's text with its markup tags
  dropped and runs of whitespace, line breaks included, as one space. TeX math stays TeX source
  (``O(n^3)``, ``\\Theta``) for cleaning's ``clean_text`` to render, as it does for every other
  source, and as the Anthology's JSON Lines export has it. The library's ``as_text()`` is not used:
  it renders TeX math with its own table, which drops sub- and superscripts (``O(n^3)`` becomes
  ``O(n3)``), and deletes line breaks instead of spacing them, gluing ``use.\\nTo`` into
  ``use.To``. On a 2025 snapshot, 79 titles and 671 abstracts from ``as_text()`` differ from the
  export's after whitespace normalisation; none of this plain text's do;
* metadata: ``authors`` ("First Last"), ``year`` (an integer), ``venue`` (the volume's venue ids,
  e.g. ``["kemt", "ws"]``), ``booktitle`` (the volume title), ``url`` (the paper's page) and ``doi``
  when there is one. These match the fields of the Anthology's JSON Lines export.

A paper without an abstract, or with an empty one, is quarantined as ``missing_abstract``.
Frontmatter entries (paper id 0: a volume's front pages, never with an abstract) are not papers
and are skipped, as the JSON Lines export does; ``stats["frontmatter"]`` counts them. Retracted
papers keep their abstracts and are read like the others, as in the export. A collection file the
library cannot parse is one ``corrupt_file`` row, and the other files are still read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource, RawRow
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.records import SourceRead, document_record, record_row, rejected_record

if TYPE_CHECKING:
    from acl_anthology import Anthology
    from acl_anthology.collections import Paper, Volume
    from acl_anthology.text import MarkupText

INSTALL_HINT = "pip install --no-deps acl-anthology==0.5.4"


def _data_dir(path: Path) -> Path | None:
    """The Anthology data directory at or under ``path``: the folder holding ``xml/``."""
    for candidate in (path, path / "data"):
        if (candidate / "xml").is_dir():
            return candidate
    return None


def detect_anthology(path: str | Path) -> bool:
    """Whether ``path`` is an Anthology data directory (``xml/*.xml`` and ``yaml/``) or holds one."""
    data = _data_dir(Path(path))
    return data is not None and (data / "yaml").is_dir() and any((data / "xml").glob("*.xml"))


def read_anthology(source: CatalogSource) -> SourceRead:
    """The papers of an Anthology data directory as document records, streamed collection by
    collection (each is released once read)."""
    started = time.perf_counter()
    path = Path(source.path)
    data = _data_dir(path)
    if data is None:
        raise CatalogError(f"ACL Anthology data not found: {path} holds neither xml/ nor data/xml/")
    if not (data / "xml" / "schema.rnc").is_file():
        # The library compares it with its own schema before reading anything.
        raise CatalogError(f"ACL Anthology data at {data} has no xml/schema.rnc")
    try:
        from acl_anthology import Anthology
    except ImportError as exc:
        raise CatalogError(f"the acl_anthology source needs the acl-anthology library: {INSTALL_HINT}") from exc
    try:
        anthology = Anthology(datadir=data, verbose=False)
        collection_ids = list(anthology.collections)  # sorted by file name
    except (OSError, ValueError) as exc:  # the library's id errors are ValueErrors
        raise CatalogError(f"{data}: cannot index the Anthology's collections: {exc}") from None
    stats: dict[str, float] = {
        "papers": 0,
        "documents": 0,
        "quarantined": 0,
        "frontmatter": 0,
        "volumes": 0,
        "read_seconds": time.perf_counter() - started,
    }
    return SourceRead(_rows(anthology, collection_ids, str(data), stats), stats)


def _rows(anthology: Anthology, collection_ids: list[str], source: str, stats: dict[str, float]) -> Iterator[RawRow]:
    clock = time.perf_counter()
    number = 0
    for collection_id in collection_ids:
        collection = anthology.collections[collection_id]
        try:
            records = [record for volume in collection.volumes() for record in _volume_records(volume, stats)]
        except Exception as exc:  # noqa: BLE001 - lxml and the library's validators raise assorted errors
            detail = f"xml/{collection.path.name}: {type(exc).__name__}: {exc}"
            records = [rejected_record(None, QuarantineReason.CORRUPT_FILE, detail)]
        else:
            stats["papers"] += len(records)
        del anthology.collections[collection_id]  # keeps memory to one collection
        for record in records:
            number += 1
            stats["quarantined" if "rejected" in record else "documents"] += 1
            row = record_row(source, number, record)
            stats["read_seconds"] += time.perf_counter() - clock
            yield row
            clock = time.perf_counter()
    stats["read_seconds"] += time.perf_counter() - clock


def _volume_records(volume: Volume, stats: dict[str, float]) -> Iterator[dict[str, Any]]:
    stats["volumes"] += 1
    booktitle = plain_text(volume.title)
    for paper in volume.papers():
        if paper.is_frontmatter:
            stats["frontmatter"] += 1
        else:
            yield _paper_record(paper, booktitle)


def _paper_record(paper: Paper, booktitle: str) -> dict[str, Any]:
    doc_id = paper.full_id
    if paper.abstract is None:
        return rejected_record(doc_id, QuarantineReason.MISSING_ABSTRACT, "the paper has no abstract")
    text = plain_text(paper.abstract)
    if not text:
        return rejected_record(doc_id, QuarantineReason.MISSING_ABSTRACT, "the paper's abstract is empty")
    year = paper.year
    metadata: dict[str, Any] = {
        "authors": [author.name.as_first_last() for author in paper.authors],
        "year": int(year) if year.isascii() and year.isdigit() else year,
        "venue": list(paper.venue_ids),
        "booktitle": booktitle,
        "url": paper.web_url,
    }
    if paper.doi:
        metadata["doi"] = paper.doi
    return document_record(doc_id, plain_text(paper.title), text=text, metadata=metadata)


def plain_text(markup: MarkupText) -> str:
    """The text of an Anthology XML field: markup tags dropped, TeX math kept as TeX source, runs of
    whitespace (line breaks included) as one space."""
    return " ".join("".join(markup.to_xml().itertext()).split())
