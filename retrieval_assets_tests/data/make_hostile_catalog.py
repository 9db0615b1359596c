"""Write ``hostile_catalog.jsonl``: a tool catalog of broken and adversarial lines, plus a few good ones.

Run ``python retrieval_assets_tests/data/make_hostile_catalog.py`` to regenerate it; the test checks
that the committed file is exactly what this script writes. Each row is (label, line bytes,
expected quarantine reason or ``None`` when the row must be kept). The 10 MB row is not in the
file (it would bloat the repository): ``huge_row()`` makes it at test time.
"""

from __future__ import annotations

import json
from pathlib import Path

PATH = Path(__file__).with_name("hostile_catalog.jsonl")
HUGE_TEXT_CHARS = 10 * 1024 * 1024
NESTING_DEPTH = 2_000  # deeper than Python's JSON parser recursion limit

Row = tuple[str, bytes, str | None]


def _tool(tool_id: object = "good-1", **fields: object) -> bytes:
    record: dict[str, object] = {
        "id": tool_id,
        "name": "Good aligner",
        "description": "Maps sequencing reads to a genome.",
    }
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP}, ensure_ascii=False).encode()


_DROP = object()


def _nested(depth: int) -> object:
    value: object = "bottom"
    for i in range(depth):
        value = {f"level{i}": value}
    return value


def hostile_rows() -> list[Row]:
    return [
        # Good rows: kept, cleaned.
        (
            "good",
            _tool(
                "good-1", keywords=["read mapping"], tenant_id="lab-a", metadata={"year": "2019", "site": {"url": "x"}}
            ),
            None,
        ),
        ("good_minimal", _tool("good-2", name="Minimal", description="Sorts alignments."), None),
        ("good_integer_id", _tool(42, name="Integer id", description="An id given as a JSON integer."), None),
        (
            "control_characters",
            _tool("ctrl-1", name="Ctrl\u0000tool", description="Text\u0007 with\u001b controls\u007f here."),
            None,
        ),
        (
            "latex_and_nfkc",
            _tool("tex-1", name="\ufb01le tool", description=r"Computes $\alpha$-helix \emph{content}."),
            None,
        ),
        (
            "reserved_metadata_key",
            _tool("meta-1", description="Metadata named like a payload field.", metadata={"doc_id": "x"}),
            None,
        ),
        ("bidi_and_zero_width", _tool("bidi-1", name="RTL \u202e tool", description="zero\u200bwidth text"), None),
        # Line-level damage.
        ("malformed_json", b'{"id": "bad-json", "name": "Broken', "malformed_json"),
        ("trailing_garbage", b'{"id": "trailing", "name": "T", "description": "d"} extra', "malformed_json"),
        ("two_objects_on_one_line", b'{"id": "a"}{"id": "b"}', "malformed_json"),
        ("single_quotes", b"{'id': 'py-dict', 'name': 'P'}", "malformed_json"),
        ("nul_byte_outside_strings", b'{"id": "nul"\x00, "name": "N"}', "malformed_json"),
        ("deep_json_nesting", b"[" * NESTING_DEPTH + b"]" * NESTING_DEPTH, "malformed_json"),
        ("invalid_utf8", b'{"id": "bad-utf8", "name": "caf\xe9", "description": "Latin-1 bytes."}', "invalid_utf8"),
        ("truncated_utf8", b'{"id": "cut-utf8", "name": "\xe2\x82", "description": "A cut sequence."}', "invalid_utf8"),
        ("blank", b"", "blank_line"),
        ("whitespace_line", b" \t  ", "blank_line"),
        ("array", b'["good-1", "Good aligner"]', "not_an_object"),
        ("string", b'"just a string"', "not_an_object"),
        ("null", b"null", "not_an_object"),
        # Ids.
        ("missing_id", _tool(_DROP), "missing_id"),
        ("null_id", _tool(None), "missing_id"),
        ("empty_id", _tool(""), "missing_id"),
        ("whitespace_id", _tool("   "), "missing_id"),
        # good-1 is lab-a's: ids live in a tenant's namespace, so the duplicate names the same tenant.
        (
            "duplicate_id_different_text",
            _tool("good-1", tenant_id="lab-a", description="Completely different text."),
            "duplicate_id",
        ),
        ("duplicate_id_same_text", _tool("good-2", name="Minimal", description="Sorts alignments."), "duplicate_id"),
        # Text.
        ("empty_text", _tool("empty-1", description=""), "empty_text"),
        ("whitespace_only_text", _tool("blank-1", description=" \n\t\u00a0\u2003 "), "empty_text"),
        ("control_only_text", _tool("ctrl-only", description="\u0000\u0001\u0002\u007f"), "empty_text"),
        ("missing_description", _tool("no-desc", description=_DROP), "empty_text"),
        # Metadata.
        ("deeply_nested_metadata", _tool("deep-1", metadata={"root": _nested(50)}), "invalid_metadata"),
        ("list_of_objects_metadata", _tool("deep-2", metadata={"authors": [{"name": "A"}]}), "invalid_metadata"),
        ("colliding_metadata_keys", _tool("collide-1", metadata={"a.b": 1, "a": {"b": 2}}), "invalid_metadata"),
        # Precomputed vectors (docs/sources.md#precomputed-vectors).
        ("vector_string", _tool("vec-1", **{"embedding:BAAI/bge-small-en-v1.5": "[0.1, 0.2]"}), "invalid_vector"),
        ("vector_zero", _tool("vec-2", **{"embedding:BAAI/bge-small-en-v1.5": [0.0, 0.0]}), "invalid_vector"),
        # A wrong type in every field.
        ("id_list", _tool(["good-1"]), "invalid_field_type"),
        ("id_object", _tool({"id": "x"}), "invalid_field_type"),
        ("id_bool", _tool(True), "invalid_field_type"),
        ("id_float", _tool(1.5), "invalid_field_type"),
        ("name_int", _tool("name-1", name=7), "invalid_field_type"),
        ("name_missing", _tool("name-2", name=_DROP), "invalid_field_type"),
        ("description_list", _tool("desc-1", description=["a", "b"]), "invalid_field_type"),
        ("keywords_string", _tool("kw-1", keywords="read mapping"), "invalid_field_type"),
        ("keywords_mixed", _tool("kw-2", keywords=["ok", 3]), "invalid_field_type"),
        ("tenant_id_int", _tool("tenant-1", tenant_id=5), "invalid_field_type"),
        ("metadata_list", _tool("meta-2", metadata=["topics"]), "invalid_field_type"),
        ("metadata_string", _tool("meta-3", metadata="topics"), "invalid_field_type"),
        ("relations_list", _tool("rel-1", relations=["samtools"]), "invalid_field_type"),
        ("relations_target_string", _tool("rel-2", relations={"requires": "samtools"}), "invalid_field_type"),
        ("relations_target_object", _tool("rel-3", relations={"requires": [{"id": "samtools"}]}), "invalid_field_type"),
    ]


def huge_row() -> Row:
    """A 10 MB description: quarantined before any cleaning work is spent on it."""
    return ("huge_text", _tool("huge-1", description="x" * HUGE_TEXT_CHARS), "text_too_long")


def catalog_bytes(rows: list[Row]) -> bytes:
    return b"".join(line + b"\n" for _, line, _ in rows)


if __name__ == "__main__":
    PATH.write_bytes(catalog_bytes(hostile_rows()))
    print(f"wrote {PATH}")
