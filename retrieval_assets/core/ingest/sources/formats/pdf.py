"""PDF files: the text layer read with pypdfium2, one block per (section, page).

Pages are read one at a time (each page and its text page closed before the next), so a large
PDF holds only its text in memory. The rules, applied to the lines of each page in order:

* Running headers and footers: the first and last ``ZONE_LINES`` lines of a page are its header
  and footer zone. A zone line that, with its digits replaced, recurs in the zone of at least half
  of the pages (and at least 3 pages) is a running header or footer and is dropped; so is one that
  recurs in the zone of at least half of the even pages, or of the odd pages (at least 3 pages
  either way), since books and journals alternate left and right running heads ("44 CHARLES" on
  even pages, "CALCIUM WAVES IN GLIA 45" on odd ones); so is a zone line that is only a page number
  ("3", "Page 3", "Page 3 of 10", "3/10", "- 3 -", "iv").
* Section titles: a line of at most ``HEADING_MAX_WORDS`` words, not ending in ``. , ; -``, that is
  either a structural name alone on its line (``STRUCTURAL_NAMES``, any case: Abstract,
  Introduction, Methods, Results, References, ...) or numbered: ``1``, ``2.1``, ``3.`` or a Roman
  numeral with a period (``IV.``), then a title that starts with a capital letter and ends with a
  letter or ``)`` (so table rows and contents lines ending in a number are not titles), where the
  line before it does not end mid-sentence (in a lower-case letter, ``,``, ``;`` or ``-``). Each
  block's heading is the latest section title, carried across pages; the title line itself is the
  heading, not text.
* Hyphenation: a line ending in a lower-case letter and ``-`` is joined to a next line that starts
  with a lower-case letter, without the hyphen ("retrie-" + "val" -> "retrieval"); a line ending in
  another letter and ``-`` is joined keeping the hyphen ("BM-" + "25" -> "BM-25"). PDFium itself
  marks some line-end hyphens (U+FFFE / U+0002) and joins the lines; the same rule decides whether
  such a mark is dropped or becomes "-".
* Paragraphs: lines are joined with spaces; a line ending in ``. ! ? :`` that is shorter than 3/4
  of the page's longest line ends a paragraph (a paragraph's last line is usually short).
* Title, from page 1's lines and their font size (each character's font size times the scale of
  its text matrix, since many PDFs set size 1 and scale the text; a line's size is the median over
  its upright characters, so a drop cap, a footnote mark or an arXiv stamp up the margin does not
  count; a page turned by ``/Rotate`` gives no sizes). Title candidates are the lines in the top
  half of the page with at least 4 letters, letters making up at least half of their characters
  other than spaces, and not banners: ``_BANNER`` (journal and proceedings banners, DOIs, ISSNs,
  URLs, arXiv stamps, copyright and licence lines, "Submitted/Received ..." and "25 March 2016"
  dates, "Open Access") or, spaces removed, a whole-line ``_ARTICLE_LABEL`` ("R E S EAR CH A R TIC
  L E", "Review", "Editorial"). The font title is the candidates within ``TITLE_SIZE_SPREAD`` of
  the largest candidate size, when that size is at least ``TITLE_SIZE_RATIO`` times the page's
  body size (its most common size by characters): the topmost such line and those below it, each
  at most ``TITLE_LINE_GAP`` sizes below the one before, joined like paragraph lines, trailing
  footnote marks (``* ∗ † ‡``) removed, at most ``FONT_TITLE_MAX_WORDS`` words. The document
  information's Title (HTML character references decoded) counts only when it looks like a title:
  at least two words with letters, not a file or job name ("paper.dvi", "28 e.xps",
  "ipg1300180a"), not "Untitled", "Microsoft Word - ...", a template's name or cut short ("..."),
  and not a banner. It wins when there is no font title, when the two agree (each holds at least
  half of the other's words) or when it is printed among page 1's candidates (a journal logo can
  be larger than the title), since it is free of line breaks and footnote marks; otherwise the
  font title wins, because creators often leave a template's, a section's or another paper's
  Title behind ("System Model", "AI Magazine"). Without either: the first line of the first page
  with text when it is short (at most ``TITLE_MAX_WORDS`` words), a candidate by letters and
  banners, and not a section title; else the first numbered section title; else None. Author,
  subject and keywords go to metadata.

Errors: a PDF that needs a password (or uses a security handler PDFium lacks) is
``encrypted_file``; one PDFium cannot open (truncated, not a PDF) is ``corrupt_file`` with
PDFium's message; one whose every page has no text is ``no_text_layer`` (a scan that needs OCR).
So is one whose text is unreadable on more than half of its pages with at least
``GARBAGE_MIN_CHARS`` characters other than spaces: fewer than 3/5 of those characters are
letters, not counting the Latin-1 letters U+00C0..U+00FF. Type3 and other fonts without a Unicode
map render fine but extract as their raw character codes, which PDFium reads as Latin-1: symbol
soup like '! #"$%&(' with some ASCII and accented letters; real text, even a page of tables or
formulas, stays well above 3/5 letters.
"""

from __future__ import annotations

import html
import math
import re
import statistics
from collections import Counter
from typing import NamedTuple

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.formats.base import (
    BlockCollector,
    ExtractedFile,
    MetadataScalar,
    short_line,
)
from retrieval_assets.core.ingest.sources.records import ExtractionFailed

ZONE_LINES = 2
HEADING_MAX_WORDS = 12
TITLE_MAX_WORDS = 15
FONT_TITLE_MAX_WORDS = 40
TITLE_SIZE_RATIO = 1.15
TITLE_SIZE_SPREAD = 0.95
TITLE_LINE_GAP = 3
GARBAGE_MIN_CHARS = 20
STRUCTURAL_NAMES = frozenset(
    {
        "abstract", "introduction", "background", "related work", "method", "methods", "methodology",
        "materials and methods", "experiments", "experimental setup", "experimental results", "evaluation",
        "results", "discussion", "results and discussion", "conclusion", "conclusions",
        "conclusion and future work", "conclusions and future work", "future work", "limitations", "summary",
        "references", "bibliography", "acknowledgments", "acknowledgements", "acknowledgment",
        "acknowledgement", "appendix",
    }
)  # fmt: skip

_PASSWORD_ERRORS = (pdfium_raw.FPDF_ERR_PASSWORD, pdfium_raw.FPDF_ERR_SECURITY)
_NUMBERED = re.compile(r"(?:\d{1,2}(?:\.\d{1,2}){0,3}\.?|[IVX]{1,5}\.)\s+(?P<title>[A-Z].*)")
_PAGE_NUMBER = re.compile(
    r"(?:page\s+)?\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?|[-\u2013\u2014]\s*\d{1,4}\s*[-\u2013\u2014]", re.IGNORECASE
)
_ROMAN_PAGE = re.compile(r"x{0,3}(?:ix|iv|v?i{0,3})")  # front-matter pages i..xxxix, lower case only
_UNINFORMATIVE_TITLE = re.compile(
    r"untitled.*|microsoft (?:word|powerpoint) - .*|.*\btemplate\b.*|.*(?:\.\.\.|\u2026)"
    r"|.*\.(?:pdf|docx?|pptx?|tex|dvi|ps|eps|rtf|txt|xps|indd|qxd)",
    re.IGNORECASE,
)
_BANNER = re.compile(
    r"\bdoi\b|\bissn\b|\bisbn\b|arxiv|https?:|www\.|\u00a9|\(c\)|copyright|\blicen[cs]ed\b|creative commons"
    r"|open\s*access|\bproceedings\b|\bjournal\b|transactions on|technical report|preprint|this paper is included"
    r"|printed in|publishing (?:corporation|company|group|house)"
    r"|\bvol(?:ume)?\.?\s*\d|^(?:submitted|received|accepted|published)\b"
    r"|\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?(?:\s+\d{1,2},?)?\s+(?:19|20)\d\d\b",
    re.IGNORECASE,
)
# A whole-line article label, matched with its spaces removed ("R E S EAR CH A R TIC L E").
_ARTICLE_LABEL = re.compile(
    r"(?:research|original|review|short|brief)?(?:article|paper|communication|report|editorial|review|letter)s?",
    re.IGNORECASE,
)
_FOOTNOTE_MARKS = re.compile(r"[\s*\u2217\u2020\u2021]+$")
_HYPHEN_MARK = re.compile(r"[\ufffe\x02]")
_JOINED_HYPHEN_MARK = re.compile(r"(?<=[a-z])[\ufffe\x02](?=[a-z])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_DIGITS = re.compile(r"\d+")
_LATIN1_LETTER = re.compile(r"[\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff]")  # À..ÿ without × and ÷


class _SizedLine(NamedTuple):
    text: str
    size: float  # median font size of its characters, text matrix included
    top: float  # distance of its top from the top of the page
    page_height: float


def extract_pdf(data: bytes) -> ExtractedFile:
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code in _PASSWORD_ERRORS:
            raise ExtractionFailed(QuarantineReason.ENCRYPTED_FILE, f"password-protected PDF ({exc})") from None
        raise ExtractionFailed(QuarantineReason.CORRUPT_FILE, str(exc)) from None
    try:
        info = document.get_metadata_dict(skip_empty=True)
        pages = [_page_lines(document, index) for index in range(len(document))]
        _reject_unreadable(pages)
        first_page = _sized_lines(document)
    finally:
        document.close()
    pages = _drop_running_lines(pages)

    collector = BlockCollector()
    first_numbered: str | None = None
    for number, lines in enumerate(pages, start=1):
        collector.page(number)
        longest = max((len(line) for line in lines), default=0)
        run: list[str] = []
        previous: str | None = None
        for line in lines:
            if _is_section_title(line, previous):
                _add_paragraphs(collector, run, longest)
                run = []
                collector.heading(line)
                if first_numbered is None and _NUMBERED.fullmatch(line):
                    first_numbered = line
            else:
                run.append(line)
            previous = line
        _add_paragraphs(collector, run, longest)

    return ExtractedFile(
        format="pdf",
        title=_title(info.get("Title", ""), first_page, pages) or first_numbered,
        blocks=collector.blocks(),
        pages=len(pages),
        metadata=_metadata(info),
    )


def _page_lines(document: pdfium.PdfDocument, index: int) -> list[str]:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
        finally:
            textpage.close()
    except pdfium.PdfiumError as exc:
        raise ExtractionFailed(QuarantineReason.CORRUPT_FILE, f"page {index + 1}: {exc}") from None
    finally:
        page.close()
    return [line for line in map(_clean, _LINE_BREAK.split(text)) if line]


def _clean(text: str) -> str:
    text = _HYPHEN_MARK.sub("-", _JOINED_HYPHEN_MARK.sub("", text))
    return " ".join(_CONTROL.sub("", text).split())


def _reject_unreadable(pages: list[list[str]]) -> None:
    if not any(pages):
        raise ExtractionFailed(QuarantineReason.NO_TEXT_LAYER, f"{len(pages)} pages, no text on any")
    judged = garbage = 0
    for lines in pages:
        text = "".join(lines)
        chars = len(text) - text.count(" ")  # _clean leaves single spaces only
        if chars >= GARBAGE_MIN_CHARS:
            judged += 1
            letters = sum(map(str.isalpha, text)) - len(_LATIN1_LETTER.findall(text))
            garbage += 5 * letters < 3 * chars
    if 2 * garbage > judged:
        raise ExtractionFailed(
            QuarantineReason.NO_TEXT_LAYER,
            f"text layer unreadable (fonts without a Unicode map); needs OCR ({garbage} of {judged} pages)",
        )


def _sized_lines(document: pdfium.PdfDocument) -> list[_SizedLine]:
    """Page 1's lines in text order with their font size and position; none when the page is
    turned (``/Rotate``), where character boxes are not upright."""
    page = document[0]
    try:
        if page.get_rotation():
            return []
        height = page.get_height()
        textpage = page.get_textpage()
        try:
            raw = textpage.raw
            box = pdfium_raw.FS_RECTF()
            matrix = pdfium_raw.FS_MATRIX()
            lines: list[_SizedLine] = []
            chars: list[str] = []
            sizes: list[float] = []
            top = 0.0
            for index in [*range(textpage.count_chars()), -1]:  # -1: the end of the last line
                char = chr(pdfium_raw.FPDFText_GetUnicode(raw, index)) if index >= 0 else "\n"
                if char in "\r\n":
                    text = _clean("".join(chars))
                    if text and sizes:
                        lines.append(_SizedLine(text, statistics.median(sizes), height - top, height))
                    chars, sizes, top = [], [], 0.0
                    continue
                chars.append(char)
                # Only upright characters: rotated text (an arXiv stamp up the margin) is no title.
                if (
                    not char.isspace()
                    and pdfium_raw.FPDFText_GetMatrix(raw, index, matrix)
                    and matrix.b == matrix.c == 0
                    and matrix.a > 0
                    and matrix.d > 0
                ):
                    sizes.append(pdfium_raw.FPDFText_GetFontSize(raw, index) * math.sqrt(matrix.a * matrix.d))
                    if not top and pdfium_raw.FPDFText_GetLooseCharBox(raw, index, box):
                        top = box.top  # the line's first upright character stands for the line
        finally:
            textpage.close()
    except pdfium.PdfiumError as exc:
        raise ExtractionFailed(QuarantineReason.CORRUPT_FILE, f"page 1: {exc}") from None
    finally:
        page.close()
    return lines


def _is_banner(line: str) -> bool:
    return bool(_BANNER.search(line) or _ARTICLE_LABEL.fullmatch("".join(line.split())))


def _title_candidates(lines: list[_SizedLine]) -> list[_SizedLine]:
    return [
        line
        for line in lines
        if line.top < line.page_height / 2 and not _is_banner(line.text) and _letters_enough(line.text)
    ]


def _font_title(lines: list[_SizedLine], candidates: list[_SizedLine]) -> str | None:
    if not candidates:
        return None
    body_chars: Counter[int] = Counter()  # characters by size in whole points
    for line in lines:
        body_chars[round(line.size)] += len(line.text)
    largest = max(line.size for line in candidates)
    if largest < TITLE_SIZE_RATIO * body_chars.most_common(1)[0][0]:
        return None
    title_lines = sorted(
        (line for line in candidates if line.size >= TITLE_SIZE_SPREAD * largest), key=lambda line: line.top
    )
    title = title_lines[0].text
    for before, line in zip(title_lines, title_lines[1:], strict=False):
        if line.top - before.top > TITLE_LINE_GAP * largest:
            break
        title = _join(title, line.text)
    title = _FOOTNOTE_MARKS.sub("", title)
    return title if len(title.split()) <= FONT_TITLE_MAX_WORDS else None


def _letters_enough(line: str) -> bool:
    letters = sum(char.isalpha() for char in line)
    return letters >= 4 and 2 * letters >= len("".join(line.split()))


def _zone(lines: list[str]) -> list[int]:
    """Indexes of a page's header and footer lines."""
    return sorted({*range(min(ZONE_LINES, len(lines))), *range(max(0, len(lines) - ZONE_LINES), len(lines))})


def _zone_key(line: str) -> str:
    return _DIGITS.sub("#", line.lower())


def _recurring(pages: list[list[str]]) -> set[str]:
    """Zone keys on at least half of ``pages`` and on at least 3."""
    counts = Counter(key for lines in pages for key in {_zone_key(lines[i]) for i in _zone(lines)})
    needed = max(3, math.ceil(len(pages) / 2))
    return {key for key, count in counts.items() if count >= needed}


def _drop_running_lines(pages: list[list[str]]) -> list[list[str]]:
    # pages[1::2] are the even page numbers, pages[::2] the odd ones.
    recurring = _recurring(pages) | _recurring(pages[1::2]) | _recurring(pages[::2])
    kept_pages = []
    for lines in pages:
        dropped = {
            i
            for i in _zone(lines)
            if _zone_key(lines[i]) in recurring
            or _PAGE_NUMBER.fullmatch(lines[i])
            or (lines[i] and _ROMAN_PAGE.fullmatch(lines[i]))
        }
        kept_pages.append([line for i, line in enumerate(lines) if i not in dropped])
    return kept_pages


def _is_section_title(line: str, previous: str | None) -> bool:
    if len(line.split()) > HEADING_MAX_WORDS or line[-1] in ".,;-":
        return False
    if line.lower() in STRUCTURAL_NAMES:
        return True
    match = _NUMBERED.fullmatch(line)
    if match is None or not (match["title"][-1].isalpha() or match["title"][-1] == ")"):
        return False
    return previous is None or not (previous[-1].islower() or previous[-1] in ",;-")


def _join(text: str, line: str) -> str:
    """``line`` appended to ``text`` by the hyphenation rule, else with a space."""
    if len(text) >= 2 and text[-1] == "-" and text[-2].isalpha():
        hyphenated = text[-2].islower() and line[0].islower()
        return (text[:-1] if hyphenated else text) + line
    return f"{text} {line}" if text else line


def _add_paragraphs(collector: BlockCollector, lines: list[str], longest: int) -> None:
    paragraph = ""
    for line in lines:
        paragraph = _join(paragraph, line)
        if line[-1] in ".!?:" and len(line) < 0.75 * longest:
            collector.add(paragraph)
            paragraph = ""
    collector.add(paragraph)


def _title(info_title: str, first_page: list[_SizedLine], pages: list[list[str]]) -> str | None:
    candidates = _title_candidates(first_page)
    font_title = _font_title(first_page, candidates)
    info_title = " ".join(html.unescape(info_title).split())
    if _looks_like_title(info_title) and (
        font_title is None
        or _agree(info_title, font_title)
        or _squash(info_title) in _squash(" ".join(line.text for line in candidates))
    ):
        return info_title
    if font_title:
        return font_title
    first_line = next((lines[0] for lines in pages if lines), "")
    if (
        short_line(first_line, TITLE_MAX_WORDS)
        and not _is_banner(first_line)
        and _letters_enough(first_line)
        and not _is_section_title(first_line, None)
    ):
        return first_line
    return None


def _squash(text: str) -> str:
    return "".join(char for char in text.lower() if char.isalnum())


def _looks_like_title(text: str) -> bool:
    words_with_letters = sum(any(char.isalpha() for char in word) for word in text.split())
    return words_with_letters >= 2 and not _UNINFORMATIVE_TITLE.fullmatch(text) and not _is_banner(text)


def _agree(first: str, second: str) -> bool:
    """Each title holds at least half of the other's words (case and punctuation aside)."""
    words = [set(re.findall(r"\w+", title.lower())) for title in (first, second)]
    shared = len(words[0] & words[1])
    return all(2 * shared >= len(title_words) for title_words in words)


def _metadata(info: dict[str, str]) -> dict[str, MetadataScalar]:
    metadata: dict[str, MetadataScalar] = {}
    for key in ("Author", "Subject"):
        value = " ".join(info.get(key, "").split())
        if value:
            metadata[key.lower()] = value
    keywords = [word.strip() for word in re.split(r"[,;]", info.get("Keywords", "")) if word.strip()]
    if keywords:
        metadata["keywords"] = keywords
    return metadata
