"""Format/metadata tokens ("format:DICOM", "format:3D") that let a query's context meet catalog records.

An application attaches context to a query (file names such as ``scan.dcm``, metadata such
as ``{"modality": "CT"}``); records index tokens made from their own metadata by the same
rules, so both sides produce the same strings and the lexical index joins them.

Rules:

* A token is ``prefix:VALUE`` matching ``^[a-z]+:[A-Z0-9]+$``. A value is normalised by NFKD
  with accents stripped, upper-casing, and dropping every character but A-Z and 0-9, so
  "Nifti-1", "NIFTI 1" and "nifti_1" are all ``NIFTI1``; spaces and punctuation never split
  or block a match, and lexical tokenizers keep the token whole. ``aliases`` then maps a
  normalised value to its canonical one (``NIFTI1`` -> ``NIFTI``, ``MR`` -> ``MRI``).
* File names: the longest known extension wins (``.nii.gz`` before ``.gz``; ``.ome.tif``
  before ``.tif``), case-insensitive; a compression suffix (.gz, .bz2, .xz, .zst, .zip) with
  no entry of its own is stripped and the rest looked up (``reads.fastq.gz`` -> FASTQ). An
  unknown extension adds nothing. Paths and URLs are reduced to their last segment.
* Metadata (query context and record alike): a value under a ``token_fields`` field becomes
  ``format:VALUE``; a value listed in ``metadata_values[field]`` (compared normalised) adds
  its tokens; any string value shaped like a file name (no whitespace, with a known
  extension) adds that extension's tokens. Lists are read item by item; booleans and other
  types are ignored.
* Results are sorted and de-duplicated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOKEN_PATTERN = re.compile(r"^[a-z]+:[A-Z0-9]+$")
_EXTENSION_PATTERN = re.compile(r"^(?:\.[a-z0-9][a-z0-9_+-]*)+$")
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zip")
PREFIX = "format"


def _formats(*values: str) -> list[str]:
    return [f"{PREFIX}:{value}" for value in values]


def _default_extensions() -> dict[str, list[str]]:
    table = {
        # Imaging. DICOM holds 2D and 3D studies alike, so it carries no dimension token.
        (".dcm", ".dicom"): _formats("DICOM"),
        (".nii", ".nii.gz"): _formats("NIFTI", "3D"),
        (".nrrd",): _formats("NRRD", "3D"),
        (".mgz", ".mgh"): _formats("MGH", "3D"),
        (".tif", ".tiff"): _formats("TIFF"),
        (".ome.tif", ".ome.tiff"): _formats("OMETIFF", "TIFF"),
        (".svs",): _formats("SVS"),
        (".czi",): _formats("CZI"),
        (".png",): _formats("PNG"),
        (".jpg", ".jpeg"): _formats("JPEG"),
        # Sequences, alignments, variants, annotations.
        (".fastq", ".fq"): _formats("FASTQ"),
        (".fasta", ".fa", ".fna", ".faa", ".fas"): _formats("FASTA"),
        (".sam",): _formats("SAM"),
        (".bam",): _formats("BAM"),
        (".cram",): _formats("CRAM"),
        (".vcf",): _formats("VCF"),
        (".bcf",): _formats("BCF"),
        (".bed",): _formats("BED"),
        (".gff", ".gff3"): _formats("GFF"),
        (".gtf",): _formats("GTF"),
        (".gb", ".gbk", ".genbank"): _formats("GENBANK"),
        (".nwk", ".newick"): _formats("NEWICK"),
        # Structures and chemistry.
        (".pdb", ".ent"): _formats("PDB"),
        (".cif", ".mmcif"): _formats("MMCIF"),
        (".sdf",): _formats("SDF"),
        (".mol2",): _formats("MOL2"),
        (".smi",): _formats("SMILES"),
        # Omics matrices and mass spectrometry.
        (".h5ad",): _formats("H5AD", "ANNDATA"),
        (".loom",): _formats("LOOM"),
        (".h5", ".hdf5"): _formats("HDF5"),
        (".mzml",): _formats("MZML"),
        (".mzxml",): _formats("MZXML"),
        (".fcs",): _formats("FCS"),
        (".edf",): _formats("EDF"),
        # Tables.
        (".csv",): _formats("CSV"),
        (".tsv",): _formats("TSV"),
        (".parquet",): _formats("PARQUET"),
        (".xlsx",): _formats("XLSX"),
        (".json",): _formats("JSON"),
    }
    return {extension: tokens for extensions, tokens in table.items() for extension in extensions}


def _default_metadata_values() -> dict[str, dict[str, list[str]]]:
    # Keys are compared normalised, so "X-ray", "xray" and "X ray" are one key.
    return {
        "modality": {
            "CT": _formats("CT", "3D"),
            "MRI": _formats("MRI", "3D"),
            "MR": _formats("MRI", "3D"),
            "PET": _formats("PET", "3D"),
            "PT": _formats("PET", "3D"),
            "X-ray": _formats("XRAY", "2D"),
            "CR": _formats("XRAY", "2D"),
            "DX": _formats("XRAY", "2D"),
            "Ultrasound": _formats("ULTRASOUND", "2D"),
            "US": _formats("ULTRASOUND", "2D"),
            "Mammography": _formats("MAMMOGRAPHY", "2D"),
            "MG": _formats("MAMMOGRAPHY", "2D"),
        }
    }


def _default_aliases() -> dict[str, str]:
    return {
        "NIFTI1": "NIFTI",
        "NIFTI2": "NIFTI",
        "NII": "NIFTI",
        "DCM": "DICOM",
        "FQ": "FASTQ",
        "FA": "FASTA",
        "TIF": "TIFF",
        "GFF3": "GFF",
        "MR": "MRI",
        "PT": "PET",
        "CR": "XRAY",
        "DX": "XRAY",
        "US": "ULTRASOUND",
        "MG": "MAMMOGRAPHY",
    }


def normalise_value(value: str) -> str:
    """The token form of a value: accents stripped, upper-cased, only A-Z and 0-9 kept."""
    decomposed = unicodedata.normalize("NFKD", value)
    return "".join(c for c in decomposed.upper() if c.isascii() and c.isalnum())


def _check_tokens(tokens: Iterable[str], where: str) -> list[str]:
    tokens = list(tokens)
    bad = [t for t in tokens if not TOKEN_PATTERN.match(t)]
    if bad:
        raise ValueError(f"{where}: tokens {bad} must match {TOKEN_PATTERN.pattern} (e.g. 'format:DICOM')")
    return tokens


class ContextTokenSettings(BaseModel):
    # validate_default: the default tables go through the same normalisation as given ones.
    model_config = ConfigDict(frozen=True, validate_default=True)

    extensions: dict[str, list[str]] = Field(
        default_factory=_default_extensions,
        description='File extension (with its dot; compound ones like ".nii.gz" allowed) -> tokens.',
    )
    metadata_values: dict[str, dict[str, list[str]]] = Field(
        default_factory=_default_metadata_values,
        description="Field -> value -> tokens, for values that imply more than their own name.",
    )
    token_fields: list[str] = Field(
        default_factory=lambda: ["formats", "format", "modality", "data_formats"],
        description="Fields whose values become format:VALUE directly.",
    )
    aliases: dict[str, str] = Field(
        default_factory=_default_aliases,
        description="Normalised value -> canonical normalised value, applied to token_fields values.",
    )

    @field_validator("extensions")
    @classmethod
    def _check_extensions(cls, table: dict[str, list[str]]) -> dict[str, list[str]]:
        checked: dict[str, list[str]] = {}
        for extension, tokens in table.items():
            key = extension.strip().lower()
            if not _EXTENSION_PATTERN.match(key):
                raise ValueError(f"extension {extension!r} must look like '.ext' or '.ext.gz'")
            checked[key] = _check_tokens(tokens, f"extension {extension!r}")
        return checked

    @field_validator("metadata_values")
    @classmethod
    def _check_metadata_values(cls, table: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        checked: dict[str, dict[str, list[str]]] = {}
        for field, values in table.items():
            by_value = checked.setdefault(field, {})
            for value, tokens in values.items():
                key = normalise_value(value)
                if not key:
                    raise ValueError(f"metadata value {value!r} of {field!r} has no letters or digits")
                tokens = _check_tokens(tokens, f"metadata value {value!r} of {field!r}")
                by_value[key] = sorted({*by_value.get(key, []), *tokens})
        return checked

    @field_validator("aliases")
    @classmethod
    def _check_aliases(cls, table: dict[str, str]) -> dict[str, str]:
        checked = {normalise_value(alias): normalise_value(canonical) for alias, canonical in table.items()}
        if "" in checked or "" in checked.values():
            raise ValueError("aliases need letters or digits on both sides")
        return checked


# The defaults, built once (the model is frozen, so sharing one instance is safe).
_DEFAULT_SETTINGS = ContextTokenSettings()


def query_context_tokens(
    file_names: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    settings: ContextTokenSettings = _DEFAULT_SETTINGS,
) -> list[str]:
    """Tokens for the lexical query from the files and metadata an application attached."""
    tokens = {token for name in file_names for token in extension_tokens(name, settings)}
    tokens.update(record_context_tokens(metadata or {}, settings))
    return sorted(tokens)


def record_context_tokens(
    metadata: Mapping[str, Any], settings: ContextTokenSettings = _DEFAULT_SETTINGS
) -> list[str]:
    """Tokens a catalog record indexes from its metadata (the same rules as the query side)."""
    tokens: set[str] = set()
    for field, raw in metadata.items():
        # A build runs this for every chunk, over every field, abstracts included: values are
        # normalised only where a rule reads them, and a plain space settles most whitespace
        # checks (a million ACL chunks spent minutes here, most of it normalising text).
        token_field, known_values = field in settings.token_fields, settings.metadata_values.get(field)
        for value in _strings(raw):
            if token_field:
                normalised = normalise_value(value)
                if normalised:
                    tokens.add(f"{PREFIX}:{settings.aliases.get(normalised, normalised)}")
            if known_values:
                tokens.update(known_values.get(normalise_value(value), ()))
            if " " not in value and not any(c.isspace() for c in value):
                tokens.update(extension_tokens(value, settings))
    return sorted(tokens)


def extension_tokens(file_name: str, settings: ContextTokenSettings = _DEFAULT_SETTINGS) -> list[str]:
    """The tokens of a file name's extension (longest known extension wins), or [] if unknown."""
    name = re.split(r"[/\\]", file_name.strip().lower())[-1]
    while "." in name:
        parts = name.split(".")
        for i in range(1, len(parts)):
            tokens = settings.extensions.get("." + ".".join(parts[i:]))
            if tokens is not None:
                return list(tokens)
        compression = next((c for c in _COMPRESSION if name.endswith(c)), None)
        if compression is None:
            break
        name = name.removesuffix(compression)
    return []


def _strings(raw: Any) -> list[str]:
    values = raw if isinstance(raw, (list, tuple, set, frozenset)) else [raw]
    # bool is an int: a flag is not a format.
    return [str(v) for v in values if isinstance(v, (str, int)) and not isinstance(v, bool)]
