"""Why a raw row, file or paper was not turned into a Document: one reason per quarantine record."""

from enum import StrEnum


class QuarantineReason(StrEnum):
    """Why a raw row was not turned into a Document."""

    BLANK_LINE = "blank_line"  # the line is empty or whitespace only
    INVALID_UTF8 = "invalid_utf8"  # the line's or file's bytes are not valid UTF-8
    MALFORMED_JSON = "malformed_json"  # the line does not parse as JSON
    NOT_AN_OBJECT = "not_an_object"  # valid JSON, but not an object
    MISSING_ID = "missing_id"  # no id, null id or an empty id; or a table without an id column
    INVALID_FIELD_TYPE = "invalid_field_type"  # a field has the wrong type (id, name, keywords, ...)
    INVALID_METADATA = "invalid_metadata"  # metadata nested too deep, or keys collide after flattening
    EMPTY_TEXT = "empty_text"  # nothing left to retrieve after cleaning or extraction
    TEXT_TOO_LONG = "text_too_long"  # the source text is over ``max_text_chars``
    DUPLICATE_ID = "duplicate_id"  # an earlier row of the same tenant with the same id was already kept
    # A precomputed vector (an ``embedding:<model>`` field or column) that is not a non-empty list of
    # finite numbers, is all zeros, or differs in length from its source's other vectors for that model
    INVALID_VECTOR = "invalid_vector"
    # Files (``sources.files``)
    UNSUPPORTED_FORMAT = "unsupported_format"  # no extractor reads this file's extension
    FILE_TOO_LARGE = "file_too_large"  # the file is over the source's size limit
    UNREADABLE_FILE = "unreadable_file"  # permission denied, a broken or looping link, not a regular file
    CORRUPT_FILE = "corrupt_file"  # the format's library cannot open or parse the file
    ENCRYPTED_FILE = "encrypted_file"  # a password-protected PDF or Office file
    NO_TEXT_LAYER = "no_text_layer"  # a PDF without (readable) text: a scan, or fonts without a Unicode map
    # The ACL Anthology (``sources.anthology``)
    MISSING_ABSTRACT = "missing_abstract"  # a paper without an abstract (seed 004 indexes abstracts)
    # Tables (``sources.table``)
    MALFORMED_ROW = "malformed_row"  # a CSV record with more or fewer fields than the header
