"""Query understanding: control tags, natural-language filters and context tokens."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from pydantic import ValidationError

from retrieval_assets.core.query.context_tokens import (
    ContextTokenSettings,
    normalise_value,
    query_context_tokens,
    record_context_tokens,
)
from retrieval_assets.core.query.control_tags import ControlTagError, ControlTags, parse_control_tags
from retrieval_assets.core.query.nl_filters import NLFilterSettings, author_surnames, parse_nl_filters
from retrieval_assets.core.stores.filters import FilterError, parse_filters

# ---------------------------------------------------------------- control tags


@pytest.mark.parametrize(
    ("query", "text", "exclude_ids", "no_rerank", "refine"),
    [
        ("protein folding", "protein folding", [], False, False),
        ("[EXCLUDE:4983] protein folding", "protein folding", ["4983"], False, False),
        ("alignment [EXCLUDE:biotools:blast|P19-1001]", "alignment", ["biotools:blast", "P19-1001"], False, False),
        ("a [EXCLUDE: x | y ] b [exclude:y|1000genomes] c", "a b c", ["x", "y", "1000genomes"], False, False),
        ("[NO_RERANK] cancer", "cancer", [], True, False),
        ("cancer [no_rerank] [Refine]", "cancer", [], True, True),
        ("[ REFINE ] cancer [REFINE]", "cancer", [], False, True),
        ("[3H]thymidine uptake [NO_RERANK]", "[3H]thymidine uptake", [], True, False),
        ("[Ca2+]i   oscillations", "[Ca2+]i oscillations", [], False, False),
        ("[EXCLUDED] trials [REFINEMENT]", "[EXCLUDED] trials [REFINEMENT]", [], False, False),
        ("cite [1] and [2, 3] [EXCLUDE:a b]", "cite [1] and [2, 3]", ["a b"], False, False),
    ],
)
def test_control_tags_are_removed_and_read(
    query: str, text: str, exclude_ids: list[str], no_rerank: bool, refine: bool
) -> None:
    expected = ControlTags(query=text, exclude_ids=exclude_ids, no_rerank=no_rerank, refine=refine)
    assert parse_control_tags(query) == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("[EXCLUDE] cancer", "EXCLUDE needs at least one id; write [EXCLUDE:id1|id2]"),
        ("[EXCLUDE:] cancer", "EXCLUDE has no ids after ':'"),
        ("[EXCLUDE: | ] cancer", "empty id"),
        ("[EXCLUDE:a||b] cancer", "empty id"),
        ("[EXCLUDE:a|] cancer", "empty id"),
        ("[EXCLUDE a] cancer", "EXCLUDE needs ':' before its ids"),
        ("[EXCLUDE=a] cancer", "EXCLUDE needs ':' before its ids"),
        ("cancer [EXCLUDE:a", "not closed with ']'"),
        ("cancer [EXCLUDE:a\nb]", "not closed with ']'"),
        ("cancer [REFINE", "not closed with ']'; write [REFINE]"),
        ("[NO_RERANK:x] cancer", "NO_RERANK takes no value; write [NO_RERANK]"),
        ("[REFINE=1] cancer", "REFINE takes no value; write [REFINE]"),
        ("[REFINE yes] cancer", "REFINE takes no value"),
        ("[NO-RERANK] cancer", "write [NO_RERANK]"),
        ("[no rerank] cancer", "write [NO_RERANK]"),
        ("[[REFINE]] cancer", "cannot stand inside other brackets"),
        ("[see [NO_RERANK]] cancer", "cannot stand inside other brackets"),
        ("[EXCLUDE:[a]] cancer", "nested brackets"),
        ("[EXCLUDE:a [REFINE] cancer", "nested brackets"),
        ("[EXCLUDE:a] [NO_RERANK]", "holds only control tags"),
        ("  [REFINE]  ", "holds only control tags"),
    ],
)
def test_malformed_control_tags_are_errors(query: str, message: str) -> None:
    with pytest.raises(ControlTagError, match=r"malformed control tag|holds only") as raised:
        parse_control_tags(query)
    assert message in str(raised.value)


def test_control_tag_error_shows_the_tag_and_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"'\[EXCLUDE a\]' at position 7"):
        parse_control_tags("cancer [EXCLUDE a]")


def test_empty_query_without_tags_is_left_to_the_caller() -> None:
    assert parse_control_tags("   ").query == ""


# ---------------------------------------------------------------- natural-language filters

VENUES = NLFilterSettings(known_venues=frozenset({"ACL", "EMNLP", "ACL-IJCNLP", "Nature", "Nature Methods"}))
TODAY = date(2025, 6, 1)


@pytest.mark.parametrize(
    ("query", "text", "filters"),
    [
        # Years.
        ("transformers since 2019", "transformers", {"year": {"gte": 2019}}),
        ("parsing after 2018", "parsing", {"year": {"gte": 2019}}),
        ("parsing from 2019", "parsing", {"year": {"gte": 2019}}),
        ("parsing from 2019 onwards", "parsing", {"year": {"gte": 2019}}),
        ("parsing in 2019 and beyond", "parsing", {"year": {"gte": 2019}}),
        ("parsing in 2020 and 2021", "parsing in 2020 and 2021", {}),  # a year list is not read
        ("parsing before 2010", "parsing", {"year": {"lte": 2009}}),
        ("parsing until 2010", "parsing", {"year": {"lte": 2010}}),
        ("parsing up to 2010", "parsing", {"year": {"lte": 2010}}),
        ("parsing through 2010", "parsing", {"year": {"lte": 2010}}),
        ("parsing in 2020", "parsing", {"year": {"gte": 2020, "lte": 2020}}),
        ("parsing during 1999", "parsing", {"year": {"gte": 1999, "lte": 1999}}),
        ("parsing 2015-2018", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("parsing 2015–2018", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("parsing in 2015 - 2018", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("parsing between 2015 and 2018", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("parsing from 2015 to 2018", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("Parsing In 2020.", "Parsing.", {"year": {"gte": 2020, "lte": 2020}}),
        ("parsing since 2015, before 2019", "parsing", {"year": {"gte": 2015, "lte": 2018}}),
        ("since 2015 parsing", "since 2015 parsing", {}),  # a content word right after: left as text
        ("since 2019", "", {"year": {"gte": 2019}}),
        # Relative years need an explicit today.
        ("parsing in the last 5 years", "parsing", {"year": {"gte": 2020}}),
        ("parsing over the past two years", "parsing", {"year": {"gte": 2023}}),
        ("parsing in the last year", "parsing", {"year": {"gte": 2024}}),
        # Authors.
        ("papers by Smith", "papers", {"author_surnames": ["smith"]}),
        ("papers by Noah Smith", "papers", {"author_surnames": ["smith"]}),
        ("papers by Noah A. Smith about parsing", "papers about parsing", {"author_surnames": ["smith"]}),
        ("papers by Smith and Jones", "papers", {"author_surnames": ["smith", "jones"]}),
        ("papers by Smith & Jones", "papers", {"author_surnames": ["smith", "jones"]}),
        ("by Smith, Jones, and Lee et al. on parsing", "on parsing", {"author_surnames": ["smith", "jones", "lee"]}),
        ("papers by Maria de la Cruz", "papers", {"author_surnames": ["de la cruz"]}),
        ("papers by García-Pérez", "papers", {"author_surnames": ["garcía-pérez"]}),
        ("papers by Martin Luther King Jr", "papers", {"author_surnames": ["king"]}),
        ("papers by Smith et al about parsing", "papers about parsing", {"author_surnames": ["smith"]}),
        ("papers by Smith and colleagues", "papers and colleagues", {"author_surnames": ["smith"]}),
        ("papers by Smith: a survey", "papers: a survey", {"author_surnames": ["smith"]}),
        # Venues.
        ("parsing in ACL", "parsing", {"venue": ["ACL"]}),
        ("parsing at EMNLP", "parsing", {"venue": ["EMNLP"]}),
        ("parsing in acl", "parsing", {"venue": ["ACL"]}),
        ("parsing in ACL-IJCNLP", "parsing", {"venue": ["ACL-IJCNLP"]}),
        ("imaging in Nature Methods", "imaging", {"venue": ["Nature Methods"]}),
        ("parsing at EMNLP 2019", "parsing", {"venue": ["EMNLP"], "year": {"gte": 2019, "lte": 2019}}),
        # Together.
        (
            "attention by Vaswani et al. in 2017 at EMNLP",
            "attention",
            {"author_surnames": ["vaswani"], "year": {"gte": 2017, "lte": 2017}, "venue": ["EMNLP"]},
        ),
        (
            "since 2019 by Maria de la Cruz in Nature Methods",
            "",
            {"year": {"gte": 2019}, "author_surnames": ["de la cruz"], "venue": ["Nature Methods"]},
        ),
    ],
)
def test_filter_phrases_become_filters(query: str, text: str, filters: dict[str, Any]) -> None:
    parsed = parse_nl_filters(query, VENUES, today=TODAY)
    assert (parsed.query, parsed.filters) == (text, filters)
    assert len(parse_filters(parsed.filters)) == len(filters)  # a valid spec for the stores
    assert bool(parsed.phrases) == bool(filters) and all(phrase in query for phrase in parsed.phrases)


@pytest.mark.parametrize(
    "query",
    [
        "cells by day 3",
        "cells by Day 3",
        "2019-nCoV spike protein",
        "IL-6 in COVID-19",
        "p53 in 2 groups",
        "stage 2015 tumors",
        "in vitro assay",
        "T cells in mice",
        "tumours found in nature",
        "mutations in 2000 patients",
        "accuracy after 2000 epochs",
        "tolerates up to 2000 cells",
        "cohort from 2015 to 2018 patients",
        "the 2020s in review",
        "version 2.2019 release",
        "v2019 firmware",
        "Protein Folding by Deep Learning",
        "detected by Western blot",
        "estimated by Monte Carlo",
        "amplified by PCR",
        "assembled by de novo methods",
        "papers by Smith transformers",
        "not since 2019 parsing",
        'lyrics "since 2019"',
        "parsing in the last 5 years",  # no `today`: relative years stay text
        "1000genomes variants 2019x",
        'song "2018-2015" lyrics',  # a backwards range in quotes is text, not an error
        "the 2018-2015 cohort",
    ],
)
def test_ordinary_text_is_left_alone(query: str) -> None:
    parsed = parse_nl_filters(query, VENUES)
    assert (parsed.query, parsed.filters, parsed.phrases) == (" ".join(query.split()), {}, [])


def test_settings_name_the_filter_fields() -> None:
    settings = NLFilterSettings(
        year_field="pub_year", author_field="authors", venue_field="journal", known_venues=frozenset({"Cell"})
    )
    parsed = parse_nl_filters("apoptosis by Smith in Cell since 2001", settings)
    assert parsed.filters == {"pub_year": {"gte": 2001}, "authors": ["smith"], "journal": ["Cell"]}
    assert parsed.phrases == ["by Smith", "in Cell", "since 2001"]


def test_unknown_venues_are_text_without_known_venues() -> None:
    assert parse_nl_filters("parsing in ACL").filters == {}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("parsing since 2019 before 2010", "conflict: no year is both >= 2019 and <= 2009"),
        ("parsing in 2020 after 2020", "conflict"),
        ("parsing 2018-2015", "runs backwards; write it as 2015-2018"),
        ("parsing between 2018 and 2015", "runs backwards"),
        ("parsing until 2010 onwards", "an upper bound and an open end"),
    ],
)
def test_impossible_years_are_errors(query: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        parse_nl_filters(query)
    with pytest.raises(ValueError):
        parse_nl_filters(query)


@pytest.mark.parametrize(
    ("authors", "surnames"),
    [
        (["Noah A. Smith"], ["smith"]),
        (["Smith, Noah A."], ["smith"]),
        (["Maria de la Cruz"], ["de la cruz", "cruz"]),
        (["de la Cruz, Maria"], ["de la cruz", "cruz"]),
        (["Vincent van Gogh", "Van Gogh, V."], ["van gogh", "gogh"]),
        (["Martin Luther King Jr.", "King, Jr., Martin"], ["king"]),
        (["John Smith, III"], ["smith"]),
        (["Quoc V. Le"], ["le"]),
        (["José García-Pérez", "Jürgen Müller"], ["garcía-pérez", "müller"]),
        (["Ｊｏｈｎ Ｓｍｉｔｈ"], ["smith"]),  # NFKC folds full-width letters
        (["", "  "], []),
    ],
)
def test_author_surnames_on_the_record_side(authors: list[str], surnames: list[str]) -> None:
    assert author_surnames(authors) == surnames


@pytest.mark.parametrize(
    ("query", "authors"),
    [
        ("by Noah A. Smith", ["Smith, Noah"]),
        ("by de la Cruz", ["Maria de la Cruz"]),
        ("by Cruz", ["de la Cruz, Maria"]),
        ("by Vincent van Gogh", ["van Gogh, Vincent"]),
        ("by Müller", ["Jürgen Müller"]),
    ],
)
def test_query_and_record_surnames_meet(query: str, authors: list[str]) -> None:
    filters = parse_filters(parse_nl_filters(f"papers {query}").filters)
    assert [f.field for f in filters] == ["author_surnames"]
    assert filters[0].matches({"author_surnames": author_surnames(authors)})


# ---------------------------------------------------------------- context tokens


def _formats(*values: str) -> list[str]:
    return [f"format:{value}" for value in values]


@pytest.mark.parametrize(
    ("file_name", "tokens"),
    [
        ("scan.dcm", ["format:DICOM"]),
        ("SCAN.DCM", ["format:DICOM"]),
        ("reads.fastq.gz", ["format:FASTQ"]),
        ("reads_R1.fq.bz2", ["format:FASTQ"]),
        ("model.pdb", ["format:PDB"]),
        ("brain.nii.gz", ["format:3D", "format:NIFTI"]),
        ("brain.nii", ["format:3D", "format:NIFTI"]),
        ("/data/run1/slide.ome.tiff", ["format:OMETIFF", "format:TIFF"]),
        ("C:\\data\\cells.tif", ["format:TIFF"]),
        ("https://example.org/ref/genome.fa.gz", ["format:FASTA"]),
        ("counts.h5ad", ["format:ANNDATA", "format:H5AD"]),
        ("my.sample.v2.vcf", ["format:VCF"]),
        ("notes.docx", []),
        ("archive.tar.gz", []),
        ("README", []),
    ],
)
def test_file_names_give_format_tokens(file_name: str, tokens: list[str]) -> None:
    assert query_context_tokens([file_name]) == tokens


@pytest.mark.parametrize(
    ("query_files", "query_metadata", "record_metadata", "shared"),
    [
        (["a.dcm"], {"modality": "CT"}, {"formats": "dicom", "modality": "ct"}, _formats("3D", "CT", "DICOM")),
        (["brain.nii.gz"], None, {"data_formats": ["NIfTI-1", "DICOM"]}, ["format:NIFTI"]),
        ([], {"modality": "X-ray"}, {"modality": "Xray"}, ["format:2D", "format:XRAY"]),
        ([], {"modality": "MR"}, {"modality": "MRI"}, ["format:3D", "format:MRI"]),
        (["reads.fastq.gz"], None, {"formats": "fq"}, ["format:FASTQ"]),
        (["reads.fastq.gz"], None, {"example_input": "sample_R1.fastq"}, ["format:FASTQ"]),
        ([], {"formats": "Protein Data Bank"}, {"formats": ["protein-data-bank"]}, ["format:PROTEINDATABANK"]),
    ],
)
def test_query_and_record_tokens_meet(
    query_files: list[str], query_metadata: dict[str, Any] | None, record_metadata: dict[str, Any], shared: list[str]
) -> None:
    query_tokens = query_context_tokens(query_files, query_metadata)
    record_tokens = record_context_tokens(record_metadata)
    assert sorted(set(query_tokens) & set(record_tokens)) == shared


def test_record_tokens_are_sorted_unique_and_ignore_other_values() -> None:
    metadata = {
        "formats": ["DICOM", "dicom", "DCM"],
        "modality": "CT",
        "description": "reads stored as x.fastq files",  # prose, not a file name
        "license": "MIT",  # not a token field
        "version": "1.2.3",  # dotted, but no known extension
        "gpu": True,
    }
    assert record_context_tokens(metadata) == ["format:3D", "format:CT", "format:DICOM"]
    assert record_context_tokens({}) == []
    assert query_context_tokens() == []


def test_normalised_values_are_token_safe() -> None:
    assert normalise_value(" Nifti-1 ") == "NIFTI1"
    assert normalise_value("Données brutes") == "DONNEESBRUTES"
    assert normalise_value("--") == ""
    assert record_context_tokens({"formats": ["--", ""]}) == []


def test_custom_settings_are_normalised_and_used() -> None:
    settings = ContextTokenSettings(
        extensions={".CZI": ["format:CZI", "format:3D"], ".raw.gz": ["format:RAWMS"]},
        metadata_values={"instrument": {"Orbitrap Exploris": ["format:MS"]}},
        token_fields=["kind"],
        aliases={"mass-spec": "MS"},
    )
    tokens = query_context_tokens(["stack.czi", "run.raw.gz"], settings=settings)
    assert tokens == ["format:3D", "format:CZI", "format:RAWMS"]
    assert record_context_tokens({"instrument": "orbitrap exploris", "kind": "Mass spec"}, settings) == ["format:MS"]
    assert record_context_tokens({"formats": "DICOM"}, settings) == []  # "formats" is not a token field here


@pytest.mark.parametrize(
    "settings",
    [
        {"extensions": {"dcm": ["format:DICOM"]}},
        {"extensions": {".dcm": ["DICOM"]}},
        {"extensions": {".dcm": ["format:dicom"]}},
        {"extensions": {".dcm": ["Format:DICOM"]}},
        {"metadata_values": {"modality": {"CT": ["format:C T"]}}},
        {"metadata_values": {"modality": {"--": ["format:CT"]}}},
        {"aliases": {"MR": "--"}},
    ],
)
def test_invalid_token_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ContextTokenSettings(**settings)
