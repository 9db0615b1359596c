"""Natural-language filter phrases ("since 2019", "by Smith", "in ACL") turned into a filter spec.

The parser is deterministic and conservative: a phrase becomes a filter only when it can
hardly be ordinary text, and everything else stays in the semantic query.

Rules:

* Years are 4-digit, 1900-2099, and never glued to a word, a hyphen or a decimal
  ("2019-nCoV", "COVID-19", "v2019", "2019.5" are text). A bare year is text ("stage 2015");
  only these forms are filters, all ranges inclusive ints:
  "since/from Y" (gte Y), "after Y" (gte Y+1), "before Y" (lte Y-1),
  "until/till/through/up to Y" (lte Y), "in/during Y" (Y..Y); an open end after the year
  ("onwards", "and beyond", "and later", "or later") makes "in Y" gte Y too, and is a
  ``FilterError`` after an upper bound ("until 2010 onwards").
  "Y-Y" / "Y–Y" (optionally after in/during/over), "between Y and Y", "from Y to Y".
  A backwards range is a ``FilterError``.
* "in/over/during/within the last/past [N] years" needs an explicit ``today``; without it
  the phrase stays in the query. It means gte ``today.year - N``: year granularity rounds
  the window outward, so nothing inside it is lost.
* Several year phrases intersect; an empty intersection is a ``FilterError`` (a ValueError).
* "by Smith", "by Noah A. Smith", "by Maria de la Cruz", "by Smith and Jones",
  "by Smith, Jones and Lee", "by Smith et al.": names must be capitalised (lower-case
  "by day 3" is text), all-caps words are acronyms ("by PCR"), and calendar words or method
  adjectives ("by Western blot", "by Monte Carlo") are refused. The surname is the last
  name word with the particles right before it ("de la cruz"), lower-cased and NFKC; several
  authors mean any of them. A capitalised word right before "by" that is not the first word
  means a title-cased query ("Protein Folding by Deep Learning"), so no author is read there.
* "in/at/from [the] VENUE [Y]": only when VENUE matches one of ``known_venues``
  case-insensitively ("in mice", "in vitro" stay); the filter holds the spelling found in
  ``known_venues`` (the index's value), and a year right after the venue is "in Y".
  One exception, to keep English text: a venue whose known spelling has lower-case letters
  ("Nature", "Cell") is not matched by an all-lower-case mention ("found in nature"), while
  an acronym venue ("ACL") is ("in acl").
* Every phrase must be followed by the end, punctuation, a bracket, or a connective word
  ("and", "by", "in", "about", ...): "in 2000 patients", "after 2000 epochs" or
  "by Smith transformers" stay text. A phrase right after a negation ("not", "except",
  "excluding", "without") or inside double quotes stays text.
* The leftover query has the phrases removed and whitespace collapsed; it can be ``""``
  when the query was only filter phrases, and the caller decides what that means
  (filter-only browse, or an error).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from retrieval_assets.core.stores.filters import FilterError


class NLFilterSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    year_field: str = Field("year", min_length=1)
    # Record side: author_surnames() of the record's authors.
    author_field: str = Field("author_surnames", min_length=1)
    venue_field: str = Field("venue", min_length=1)
    # Venue values present in the index (matched case-insensitively).
    known_venues: frozenset[str] = frozenset()


# The defaults, built once (the model is frozen, so sharing one instance is safe).
_DEFAULT_SETTINGS = NLFilterSettings()


class ParsedQuery(BaseModel):
    query: str
    filters: dict[str, Any] = Field(default_factory=dict)
    phrases: list[str] = Field(default_factory=list)


_YEAR = r"((?:19|20)\d{2})"
_DASH = r"[-\u2010\u2011\u2012\u2013\u2014]"
# A year is not glued to a word, a hyphen, a slash or a decimal on either side.
_LEFT = r"(?<![\w./\-\u2010-\u2014])"
_RIGHT = r"(?![\w/\-\u2010-\u2014]|[.,:]\d)"
_WORD_START = r"(?<![\w\-])"
_FLAGS = re.IGNORECASE

_NUMBER_WORDS = dict(zip("one two three four five six seven eight nine ten".split(), range(1, 11), strict=True))
_COUNT = rf"([1-9]\d?|{'|'.join(_NUMBER_WORDS)})"
_RELATIVE = re.compile(
    _WORD_START + rf"(?:in|over|during|within)\s+the\s+(?:last|past)\s+(?:{_COUNT}\s+years?|year)(?!\w)", _FLAGS
)
_SPAN_RANGE = re.compile(
    _WORD_START + rf"(?:between|from)\s+{_LEFT}{_YEAR}"
    rf"(?:\s+(?:and|to|until|till|through)\s+|\s*{_DASH}\s*){_YEAR}{_RIGHT}",
    _FLAGS,
)
_DASH_RANGE = re.compile(rf"(?:{_WORD_START}(?:in|during|over)\s+)?{_LEFT}{_YEAR}\s*{_DASH}\s*{_YEAR}{_RIGHT}", _FLAGS)
_OPEN_END = r"(\s+(?:onwards?|and\s+beyond|and\s+later|or\s+later)(?!\w))?"
_SINGLE_PREPOSITION = r"(since|after|before|until|till|through|up\s+to|from|in|during)"
_SINGLE = re.compile(_WORD_START + rf"{_SINGLE_PREPOSITION}\s+{_LEFT}{_YEAR}{_RIGHT}{_OPEN_END}", _FLAGS)
_BY = re.compile(_WORD_START + r"by\s+", _FLAGS)
_TOKEN = re.compile(r"\s*([^\s,;:!?&()\[\]{}\"“”]+|[,;&])")
_NEXT_WORD = re.compile(r"\s*(\w+)")
_LISTED_YEAR = re.compile(rf"\s*{_YEAR}(?!\w)")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")

# Words after which a phrase may end, so "in 2020 about X" is a filter and "in 2000 patients" is not.
_CONNECTIVES = frozenset(
    "and or by in at on about for with from since after before until till through during between using via "
    "that which where regarding only".split()
)
_NEGATIONS = frozenset({"not", "except", "excluding", "without", "exclude", "but"})
_PARTICLES = frozenset("de da di del della der den van von la le du dos das ter ten zu".split())
_SUFFIXES = frozenset({"jr", "sr", "ii", "iii", "iv"})
# Capitalised words that follow "by" in ordinary text and are not surnames.
_NOT_NAMES = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday day week month year hour minute "
    "the this that these those a an using use means way hand default design far "
    "western northern southern eastern monte carlo".split()
)
_MAX_NAME_TOKENS = 5


def parse_nl_filters(
    query: str, settings: NLFilterSettings = _DEFAULT_SETTINGS, *, today: date | None = None
) -> ParsedQuery:
    """Split ``query`` into a semantic query and a filter spec for ``parse_filters()``."""
    spans = _Spans(query)
    years: list[tuple[int | None, int | None, str]] = []
    authors: dict[str, None] = {}
    venues: dict[str, None] = {}

    def add_years(match: re.Match[str], bounds: Callable[[re.Match[str]], tuple[int | None, int | None]]) -> None:
        # Bounds are read only once the phrase is claimed: a bad range inside quotes is just text.
        if spans.claim(match.start(), match.end()):
            years.append((*bounds(match), match.group(0)))

    if today is not None:
        this_year = today.year
        for match in _RELATIVE.finditer(query):
            add_years(match, lambda m: (this_year - _count(m.group(1)), None))
    for match in _SPAN_RANGE.finditer(query):
        add_years(match, _ordered)
    for match in _DASH_RANGE.finditer(query):
        add_years(match, _ordered)
    for match, venue_values in _venue_matches(query, settings.known_venues):
        if spans.claim(match.start(), match.end()):
            venues.update(dict.fromkeys(venue_values))
            if match.group("year"):
                years.append((int(match.group("year")), int(match.group("year")), match.group(0)))
    for match in _SINGLE.finditer(query):
        add_years(match, _single_bounds)
    for start, end, surnames in _author_phrases(query):
        if spans.claim(start, end, after_ok=spans.starts_phrase):
            authors.update(dict.fromkeys(surnames))

    filters: dict[str, Any] = {}
    if years:
        filters[settings.year_field] = _intersect(years)
    if authors:
        filters[settings.author_field] = list(authors)
    if venues:
        filters[settings.venue_field] = list(venues)
    return ParsedQuery(query=spans.leftover(), filters=filters, phrases=spans.phrases())


def author_surnames(authors: Sequence[str]) -> list[str]:
    """Record side of the author filter: the surnames a query's "by X" can match.

    "Noah A. Smith" and "Smith, Noah A." give "smith"; a surname with particles gives both
    forms, "Maria de la Cruz" and "de la Cruz, Maria" give ["de la cruz", "cruz"], so that
    "by de la Cruz" and "by Cruz" both match. Suffixes (Jr., III) are dropped. Lower-cased,
    NFKC, accents kept; de-duplicated in order.
    """
    found: dict[str, None] = {}
    for raw in authors:
        head, _, tail = unicodedata.normalize("NFKC", raw).strip().partition(",")
        tokens = head.split()
        if tail.strip() and not _is_suffix(tail.strip()):
            full = " ".join(tokens).lower()  # "Surname, Given": all before the comma is the surname
        else:
            while tokens and _is_suffix(tokens[-1]):
                tokens.pop()
            full = _surname(tokens) if tokens else ""
        if full:
            found[full] = None
            found[full.split()[-1]] = None
    return list(found)


class _Spans:
    """The character spans taken by phrases, and those refused, so that nothing is read twice."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.accepted: list[tuple[int, int]] = []
        self.taken: list[tuple[int, int]] = [m.span() for m in _QUOTED.finditer(query)]

    def claim(self, start: int, end: int, after_ok: Callable[[int], bool] | None = None) -> bool:
        """Take ``start:end`` as a phrase if it is free and reads as a filter in its context."""
        if any(start < e and s < end for s, e in self.taken):
            return False
        self.taken.append((start, end))  # a refused phrase also keeps weaker patterns off its text
        if _after_negation(self.query, start):
            return False
        if not (_ends_cleanly(self.query, end) or (after_ok is not None and after_ok(end))):
            return False
        self.accepted.append((start, end))
        return True

    def starts_phrase(self, pos: int) -> bool:
        pos += len(self.query[pos:]) - len(self.query[pos:].lstrip())
        return any(s == pos for s, _ in self.accepted)

    def phrases(self) -> list[str]:
        return [self.query[s:e].strip() for s, e in sorted(self.accepted)]

    def leftover(self) -> str:
        pieces: list[str] = []
        pos = 0
        for start, end in sorted(self.accepted):
            pieces.append(self.query[pos:start])
            pos = end
        pieces.append(self.query[pos:])
        text = " ".join(" ".join(pieces).split())
        text = re.sub(r"\s+([,.;:!?])", r"\1", text)
        text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
        return text.strip(" ,;:")


def _ends_cleanly(query: str, end: int) -> bool:
    rest = query[end:].lstrip()
    if not rest or not (rest[0].isalnum() or rest[0] == "_"):
        return True
    word = _NEXT_WORD.match(rest)
    if word is None or word.group(1).lower() not in _CONNECTIVES:
        return False
    # "in 2020 and 2021" is a list of years this parser does not read; keep all of it as text.
    return word.group(1).lower() not in ("and", "or") or _LISTED_YEAR.match(rest, word.end()) is None


def _after_negation(query: str, start: int) -> bool:
    words = query[:start].split()
    return bool(words) and words[-1].lower().strip(",;:") in _NEGATIONS


def _single_bounds(match: re.Match[str]) -> tuple[int | None, int | None]:
    prep, year, open_end = " ".join(match.group(1).lower().split()), int(match.group(2)), match.group(3)
    if prep in ("since", "from"):
        return year, None
    if prep == "after":
        return year + 1, None
    if open_end:
        if prep in ("in", "during"):
            return year, None
        raise FilterError(f"{match.group(0).strip()!r} sets an upper bound and an open end at once; keep one of them")
    if prep == "before":
        return None, year - 1
    if prep in ("until", "till", "through", "up to"):
        return None, year
    return year, year  # in, during


def _count(written: str | None) -> int:
    if written is None:
        return 1  # "the last year"
    return _NUMBER_WORDS.get(written.lower()) or int(written)


def _ordered(match: re.Match[str]) -> tuple[int, int]:
    first, last = int(match.group(1)), int(match.group(2))
    if first > last:
        raise FilterError(f"the year range {match.group(0).strip()!r} runs backwards; write it as {last}-{first}")
    return first, last


def _intersect(years: list[tuple[int | None, int | None, str]]) -> dict[str, int]:
    lows = [gte for gte, _, _ in years if gte is not None]
    highs = [lte for _, lte, _ in years if lte is not None]
    gte, lte = max(lows, default=None), min(highs, default=None)
    if gte is not None and lte is not None and gte > lte:
        phrases = ", ".join(repr(phrase.strip()) for _, _, phrase in years)
        raise FilterError(f"the year phrases {phrases} conflict: no year is both >= {gte} and <= {lte}")
    return {key: value for key, value in (("gte", gte), ("lte", lte)) if value is not None}


def _venue_matches(query: str, known_venues: frozenset[str]) -> Iterator[tuple[re.Match[str], list[str]]]:
    if not known_venues:
        return
    pattern, by_key = _venue_pattern(known_venues)
    for match in pattern.finditer(query):
        written = match.group("venue")
        # A lower-case mention matches only acronym venues: "in acl" is ACL, "in nature" is text.
        candidates = by_key[" ".join(written.split()).casefold()]
        values = [v for v in candidates if not written.islower() or not _has_lower(v)]
        if values:
            yield match, values


def _has_lower(text: str) -> bool:
    return any(c.islower() for c in text)


@lru_cache(maxsize=32)
def _venue_pattern(known_venues: frozenset[str]) -> tuple[re.Pattern[str], dict[str, list[str]]]:
    by_key: dict[str, list[str]] = {}
    for venue in sorted(known_venues):
        key = " ".join(venue.split()).casefold()
        if key:
            by_key.setdefault(key, []).append(venue)
    # Longest first, so "ACL-IJCNLP" wins over "ACL"; inner spaces match any whitespace.
    names = sorted({" ".join(v.split()) for vs in by_key.values() for v in vs}, key=len, reverse=True)
    alternatives = "|".join(r"\s+".join(re.escape(part) for part in name.split()) for name in names)
    pattern = re.compile(
        _WORD_START + rf"(?:in|at|from)\s+(?:the\s+)?(?P<venue>{alternatives})(?![\w\-])"
        rf"(?:\s+{_LEFT}(?P<year>(?:19|20)\d{{2}}){_RIGHT})?",
        _FLAGS,
    )
    return pattern, by_key


def _author_phrases(query: str) -> Iterator[tuple[int, int, list[str]]]:
    for by in _BY.finditer(query):
        if _title_cased_before(query, by.start()):
            continue
        surnames: list[str] = []
        end = by.end()
        while True:
            name = _read_name(query, end)
            if name is None:
                break
            surname, end = name
            surnames.append(surname)
            following = _separator_end(query, end)
            if following is None:
                break
            if following[1]:  # "et al." closes the list
                end = following[0]
                break
            if _read_name(query, following[0]) is None:
                break
            end = following[0]
        if surnames:
            yield by.start(), end, surnames


def _read_name(query: str, pos: int) -> tuple[str, int] | None:
    """Read one capitalised person name at ``pos``: its surname and where it ends."""
    tokens: list[tuple[str, int]] = []
    for token, end in _tokens(query, pos):
        if not (_is_name_word(token) or _is_initial(token) or token.lower() in _PARTICLES):
            break
        if len(tokens) == _MAX_NAME_TOKENS:
            return None  # a run of capitalised words this long is a title, not a name
        tokens.append((token, end))
    while tokens and not _is_name_word(tokens[-1][0]):
        tokens.pop()
    words = [t for t, _ in tokens]
    while words and _is_suffix(words[-1]):
        words.pop()  # "Smith Jr": the phrase keeps the suffix, the surname does not
    if not words or not _is_name_word(words[-1]):
        return None
    return _surname(words), tokens[-1][1]


def _separator_end(query: str, pos: int) -> tuple[int, bool] | None:
    """After a name: where the next name may start (or the end of "et al."), and whether it was "et al."."""
    tokens = _tokens(query, pos)
    first = next(tokens, None)
    if first is None:
        return None
    word, end = first
    if word.lower() == "et":
        second = next(tokens, None)
        if second is not None and second[0].lower() in ("al", "al."):
            return second[1], True
        return None
    if word == ",":
        second = next(tokens, None)
        if second is not None and second[0].lower() in ("and", "&"):
            return second[1], False
        return end, False
    if word.lower() in ("and", "&"):
        return end, False
    return None


def _tokens(query: str, pos: int) -> Iterator[tuple[str, int]]:
    """Tokens from ``pos`` with their end offsets; a final period is not part of a word."""
    while (match := _TOKEN.match(query, pos)) is not None:
        token, end = match.group(1), match.end()
        if token.endswith(".") and not _is_initial(token) and token.lower() != "al.":
            token, end = token[:-1], end - 1
        if not token:
            return
        yield token, end
        pos = end


def _title_cased_before(query: str, by_start: int) -> bool:
    words = query[:by_start].split()
    return len(words) >= 2 and _is_name_word(words[-1].strip(",;:"))


def _is_name_word(token: str) -> bool:
    letters = token.replace("-", "").replace("'", "").replace("\u2019", "")
    return (
        len(token) >= 2
        and letters.isalpha()
        and token[0].isupper()
        and _has_lower(token)
        and token.lower() not in _NOT_NAMES
    )


def _is_initial(token: str) -> bool:
    return re.fullmatch(r"(?:[^\W\d_]\.)+", token) is not None and token[0].isupper()


def _is_suffix(token: str) -> bool:
    return token.lower().rstrip(".") in _SUFFIXES


def _surname(tokens: Sequence[str]) -> str:
    """The last name word and the particles right before it ("de la Cruz"), lower-cased and NFKC."""
    start = len(tokens) - 1
    while start > 0 and tokens[start - 1].lower() in _PARTICLES:
        start -= 1
    return unicodedata.normalize("NFKC", " ".join(tokens[start:])).lower()
