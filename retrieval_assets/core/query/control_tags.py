"""Control tags embedded in a query string: ``[EXCLUDE:id1|id2]``, ``[NO_RERANK]``, ``[REFINE]``.

Rules:

* Tags may stand anywhere in the query; tag names are case-insensitive and may have
  whitespace inside the brackets (``[ refine ]``, ``[EXCLUDE: a | b ]``).
* ``[EXCLUDE:...]`` takes one or more ids separated by ``|``. Ids are trimmed and may hold
  any character except ``|``, ``]``, ``[`` and a line break; several EXCLUDE tags accumulate
  (first-seen order, de-duplicated).
* A bracket that opens with a tag name but is not exactly one of the three forms is a
  ``ControlTagError`` naming the problem and the correct form, never ordinary text:
  ``[EXCLUDE]``, ``[EXCLUDE:]``, ``[EXCLUDE:a||b]``, ``[EXCLUDE a]``, an unclosed
  ``[EXCLUDE:a``, ``[NO_RERANK:x]``, ``[REFINE=1]``, ``[NO-RERANK]``, and a tag nested in
  (or containing) other brackets.
* Any other square-bracketed text is query text and is kept (``[3H]thymidine``, ``[Ca2+]i``).
  A name must end at a non-word character to count, so ``[EXCLUDED]`` or ``[REFINEMENT]``
  are text too.
* A query that held tags and has nothing left once they are removed is an error; an input
  that was empty to begin with is returned as ``""`` (the caller decides).

Tags can only remove documents or switch steps off, so a tag injected into a query never
widens what a caller may see.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict


class ControlTagError(ValueError):
    """A malformed control tag; the message says what is wrong and shows the correct form."""


class ControlTags(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str
    exclude_ids: list[str] = []
    no_rerank: bool = False
    refine: bool = False


_FORMS = {
    "EXCLUDE": "[EXCLUDE:id1|id2]",
    "NO_RERANK": "[NO_RERANK]",
    "REFINE": "[REFINE]",
}
# NO RERANK / NO-RERANK / NORERANK are recognised only to be refused with the right spelling.
_TAG_START = re.compile(r"\[\s*(EXCLUDE|NO[ _-]?RERANK|REFINE)(?!\w)", re.IGNORECASE)
_SHOWN_CHARS = 40


def parse_control_tags(query: str) -> ControlTags:
    """Strip control tags from ``query`` and return them with the remaining query text."""
    kept: list[str] = []
    exclude_ids: dict[str, None] = {}  # an ordered set
    flags: set[str] = set()
    depth = 0  # open ordinary brackets, to refuse a tag inside one
    pos = 0
    while pos < len(query):
        char = query[pos]
        if char == "[":
            start = _TAG_START.match(query, pos)
            if start is not None:
                if depth > 0:
                    close = query.find("]", pos)
                    end = close + 1 if close != -1 else len(query)
                    raise _error(query, pos, end, "a control tag cannot stand inside other brackets")
                name, ids, pos = _read_tag(query, start)
                if name == "EXCLUDE":
                    exclude_ids.update(dict.fromkeys(ids))
                else:
                    flags.add(name)
                kept.append(" ")
                continue
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        kept.append(char)
        pos += 1

    text = " ".join("".join(kept).split())
    if not text and (exclude_ids or flags):
        raise ControlTagError(f"the query {query!r} holds only control tags: there is nothing left to search")
    return ControlTags(
        query=text,
        exclude_ids=list(exclude_ids),
        no_rerank="NO_RERANK" in flags,
        refine="REFINE" in flags,
    )


def _read_tag(query: str, start: re.Match[str]) -> tuple[str, list[str], int]:
    """Read the tag opened by ``start``: its canonical name, its ids and the index past ``]``."""
    raw_name = start.group(1)
    name = raw_name.upper()
    if name not in _FORMS:
        raise _error(query, start.start(), start.end(), f"unknown spelling {raw_name!r}; write {_FORMS['NO_RERANK']}")
    body_start = start.end()
    close = query.find("]", body_start)
    line_end = _first_of(query, body_start, "\n", "\r")
    nested = query.find("[", body_start, close if close != -1 else len(query))
    if nested != -1 and (line_end == -1 or nested < line_end):
        raise _error(query, start.start(), nested + 1, f"'[' inside the tag (nested brackets); write {_FORMS[name]}")
    if close == -1 or (line_end != -1 and line_end < close):
        shown_end = line_end if line_end != -1 else len(query)
        raise _error(query, start.start(), shown_end, f"the tag is not closed with ']'; write {_FORMS[name]}")
    body = query[body_start:close].strip()
    end = close + 1

    if name != "EXCLUDE":
        if body:
            raise _error(query, start.start(), end, f"{name} takes no value; write {_FORMS[name]}")
        return name, [], end
    if not body:
        raise _error(query, start.start(), end, f"EXCLUDE needs at least one id; write {_FORMS[name]}")
    if not body.startswith(":"):
        raise _error(query, start.start(), end, f"EXCLUDE needs ':' before its ids; write {_FORMS[name]}")
    ids = [part.strip() for part in body[1:].split("|")]
    if ids == [""]:
        raise _error(query, start.start(), end, f"EXCLUDE has no ids after ':'; write {_FORMS[name]}")
    if "" in ids:
        reason = f"EXCLUDE has an empty id (check the '|' separators); write {_FORMS[name]}"
        raise _error(query, start.start(), end, reason)
    return name, ids, end


def _first_of(text: str, start: int, *needles: str) -> int:
    found = [i for i in (text.find(n, start) for n in needles) if i != -1]
    return min(found, default=-1)


def _error(query: str, start: int, end: int, reason: str) -> ControlTagError:
    shown = query[start:end]
    if len(shown) > _SHOWN_CHARS:
        shown = shown[:_SHOWN_CHARS] + "..."
    return ControlTagError(f"malformed control tag {shown!r} at position {start}: {reason}")
