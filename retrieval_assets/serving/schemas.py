"""The HTTP API's request and response schemas: search bodies and stream parameters, filters,
posted catalog records, document receipts and views, and the error body.

Their limits (query length, ``top_k`` range, body sizes, batch size) are the API's; a field's
pattern is spelled out for every regex engine, so that the published schema is exactly what is
accepted (``test_openapi_contract`` checks it).
"""

import math
import re
from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from retrieval_assets.core.ingest.cleaning import DEFAULT_MAX_TEXT_CHARS
from retrieval_assets.core.ingest.inbox import DocumentStatus, InboxOperation
from retrieval_assets.core.models import FusionMethod, SearchRequest, Strategy

MAX_QUERY_CHARS = 1_000
MAX_TOP_K = 1_000
MAX_TENANT_CHARS = 200
MAX_CONTEXT_ITEMS = 32
# A character that str.strip() keeps, spelled out so that every regex engine reads it alike.
NOT_ONLY_SPACE = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
# Larger bodies are refused with 413 while they are read: searches are small, and cleaning caps
# a document's text at 200k characters anyway.
MAX_SEARCH_BODY_BYTES = 64_000
MAX_DOCUMENT_BYTES = 2_000_000
MAX_DOCUMENT_BATCH = 1_000  # records in one POST /documents

FiniteNumber = Annotated[float, Field(strict=True, allow_inf_nan=False)]
FilterScalar = StrictStr | StrictInt | FiniteNumber | StrictBool
# An identifier every index has, with ids from the bundled catalog (data/scifact_mini).
FILTERS_EXAMPLE = {"doc_id": ["4983", "70490"]}


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # a bound is left out, never null


class FilterRange(BaseModel):
    """An inclusive numeric range: ``gte``, ``lte`` or both."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    gte: FiniteNumber = Field(None, json_schema_extra=_no_default)  # type: ignore[assignment]
    lte: FiniteNumber = Field(None, json_schema_extra=_no_default)  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _bounds(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = set(value) - {"gte", "lte"}
            if unknown:
                raise ValueError(f"unknown range keys {sorted(unknown)}; use gte/lte")
            if not value:
                raise ValueError("a range needs gte, lte or both")
        return value


def _filter_kind(value: Any) -> str | None:
    if isinstance(value, dict | FilterRange):
        return "range"
    if isinstance(value, list):
        return "values"
    return "value" if isinstance(value, str | int | float) else None


FilterValue = Annotated[
    Annotated[FilterScalar, Tag("value")]
    | Annotated[list[FilterScalar], Field(min_length=1), Tag("values")]
    | Annotated[FilterRange, Tag("range")],
    Discriminator(
        _filter_kind,
        custom_error_type="filter_value",
        custom_error_message="a filter is a string, number or boolean, a non-empty list of them, or a {gte, lte} range",
    ),
]
Filters = Annotated[
    dict[Annotated[str, Field(min_length=1)], FilterValue],
    Field(
        max_length=MAX_CONTEXT_ITEMS,
        description=(
            "Metadata filters, applied before top-k: filter field -> a value (equal), a non-empty list "
            "(any of) or a {gte, lte} range (inclusive, numeric). The field names and their types are "
            "data of the served index version, not of this schema: `GET /health` lists them under "
            "`filter_fields` (every index has doc_id, chunk_id, tenant_id and section). A field the "
            "served version does not have, or a value its type cannot hold, is a 409."
        ),
        examples=[FILTERS_EXAMPLE],
    ),
]
ContextMetadata = Annotated[dict[str, Any], Field(max_length=MAX_CONTEXT_ITEMS)]
FILTERS_ADAPTER = TypeAdapter(Filters)
CONTEXT_METADATA_ADAPTER = TypeAdapter(ContextMetadata)


class _SearchFields(BaseModel):
    """Fields shared by the JSON body of ``POST /search`` and the query string of the stream."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, json_schema_extra={"pattern": NOT_ONLY_SPACE})
    top_k: int = Field(10, ge=1, le=MAX_TOP_K)
    tenant: str | None = Field(
        None, min_length=1, max_length=MAX_TENANT_CHARS, validation_alias=AliasChoices("tenant", "tenant_id")
    )
    strategies: list[Strategy] | None = Field(None, min_length=1, max_length=len(Strategy))
    fusion: FusionMethod | None = None
    rerank: bool | None = None
    expand: bool | None = None
    multi_query: bool | None = None
    context_files: list[Annotated[str, Field(max_length=255)]] = Field(
        default_factory=list, max_length=MAX_CONTEXT_ITEMS
    )

    @field_validator("query")
    @classmethod
    def _not_only_space(cls, value: str) -> str:
        if not value.strip():  # what NOT_ONLY_SPACE says to any regex engine
            raise ValueError("the query needs a character that is not a space")
        return value

    def to_request(self, filters: dict[str, Any] | None, context_metadata: dict[str, Any]) -> SearchRequest:
        return SearchRequest(
            query=self.query,
            top_k=self.top_k,
            filters=filters,
            tenant_id=self.tenant,
            strategies=list(self.strategies) if self.strategies else None,
            fusion=self.fusion,
            rerank=self.rerank,
            expand=self.expand,
            multi_query=self.multi_query,
            context_files=self.context_files,
            context_metadata=context_metadata,
        )


class SearchBody(_SearchFields):
    # JSON has types: "5" is no number here, nor 0 a boolean (the stream's query string is all text).
    model_config = ConfigDict(strict=True)

    top_k: int = Field(10, ge=1, le=MAX_TOP_K, strict=False)  # 5.0 is a JSON Schema integer too
    strategies: list[Annotated[Strategy, Strict(False)]] | None = Field(None, min_length=1, max_length=len(Strategy))
    fusion: Annotated[FusionMethod, Strict(False)] | None = None
    filters: Filters | None = None
    context_metadata: ContextMetadata = Field(default_factory=dict)

    @field_validator("top_k", mode="before")
    @classmethod
    def _json_number(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("top_k must be an integer")  # noqa: TRY004 (pydantic reports a ValueError as a 422)
        return value

    @field_validator("filters", "context_metadata")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        problem = unstorable(value)
        if problem:
            raise ValueError(problem)
        return value


class StreamParams(_SearchFields):
    # JSON objects, as in POST /search (the OpenAPI document says so: see _contract).
    filters: str | None = None
    context_metadata: str | None = None

    @field_validator("strategies", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # The stream's query string may say strategies=bm25,dense as well as strategies=bm25&strategies=dense.
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [part.strip() for v in value for part in v.split(",") if part.strip()]
        return value


DocumentTenantParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        description="the document's tenant, one the API key is granted. POST and DELETE default to the key's only "
        "tenant, else to the server's default tenant; GET looks in every tenant the key may see",
    ),
]


# A character cleaning keeps (no space, control character or LaTeX markup), so that a text holding
# one is not empty once cleaned; spelled out so that every regex engine reads it alike.
KEPT_CHARACTER = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\\{}$%&~^_#]"
# A metadata key cleaning takes: it ends with a character that is neither a space nor a dot.
METADATA_KEY = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000.]$"
# keys must match the key pattern, not merely be checked when they do
_CLOSED: JsonDict = {"additionalProperties": False}
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]  # every store keeps integers as int64
FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-(2**63), le=2**63 - 1)]
MetadataKey = Annotated[str, Field(pattern=METADATA_KEY)]
MetadataValue = (
    StrictStr | Int64 | FiniteFloat | StrictBool | list[StrictStr | StrictInt | FiniteFloat | StrictBool | None] | None
)
DocumentId = Annotated[StrictStr, Field(pattern=NOT_ONLY_SPACE)] | StrictInt
DocumentText = Annotated[StrictStr, Field(max_length=DEFAULT_MAX_TEXT_CHARS, pattern=KEPT_CHARACTER)]


class ToolRecord(BaseModel):
    """A tool catalog record as POST /documents takes it: what cleaning keeps, with the request's
    tenant (a record may not name its own). Other fields are ignored, as in the catalog."""

    model_config = ConfigDict(extra="allow", regex_engine="python-re")

    id: DocumentId
    name: StrictStr
    description: DocumentText
    keywords: list[StrictStr] = []
    metadata: Annotated[
        dict[
            MetadataKey,
            MetadataValue | Annotated[dict[MetadataKey, MetadataValue], Field(json_schema_extra=_CLOSED)],
        ],
        Field(json_schema_extra=_CLOSED, description="scalars, lists of them, or one level of objects of those"),
    ] = {}
    relations: dict[StrictStr, list[StrictStr | StrictInt]] = {}
    tenant_id: None = Field(None, description="not taken over HTTP: the `tenant` parameter names the tenant")

    @field_validator("tenant_id", mode="before")
    @classmethod
    def _tenant_from_the_request(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("a posted record does not name its tenant: the tenant parameter does")
        return value


class BeirRecord(BaseModel):
    """A BEIR corpus record as POST /documents takes it. Its other fields that are scalars, or
    lists of them, become metadata, so every field name follows the metadata key rule."""

    model_config = ConfigDict(
        extra="allow", regex_engine="python-re", json_schema_extra={"propertyNames": {"pattern": METADATA_KEY}}
    )
    __pydantic_extra__: dict[
        str, StrictStr | Int64 | FiniteFloat | StrictBool | list[Any] | dict[str, Any] | None
    ] = Field(init=False)

    id: DocumentId = Field(alias="_id")
    title: StrictStr | None = None
    text: DocumentText
    metadata: dict[MetadataKey, MetadataValue | dict[str, Any]] = Field(
        {}, description="free-form; its scalar values are kept", json_schema_extra=_CLOSED
    )

    @model_validator(mode="after")
    def _names_are_metadata_keys(self) -> "BeirRecord":
        if any(not re.search(METADATA_KEY, name) for name in self.model_extra or {}):
            raise ValueError(
                "a field name must end with a character that is neither a space nor a dot (it becomes a metadata key)"
            )
        return self


RECORD_MODELS: dict[str, type[BaseModel]] = {"tool_catalog": ToolRecord, "beir": BeirRecord}


def documents_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    record = model.model_json_schema(by_alias=True)
    batch = {"type": "array", "items": record, "minItems": 1, "maxItems": MAX_DOCUMENT_BATCH}
    return {"oneOf": [record, batch]}


class DocumentReceipt(BaseModel):
    """One accepted upsert or delete, pending until a build takes it in (see GET /documents/{id})."""

    receipt: str
    operation: InboxOperation
    doc_id: str
    tenant_id: str
    status: Literal["pending"] = "pending"
    received_at: str


class DocumentsAccepted(BaseModel):
    receipts: list[DocumentReceipt]  # one per record, in the order posted
    message: str = "accepted; the next index build applies it"


class DocumentView(DocumentStatus):
    """A document's status (``version``: the promoted version that serves it so, or for a rejected
    entry the one whose build refused it; ``candidate``: a sealed version that took it in but is
    not promoted yet), with its latest inbox entry's ``receipt``, ``operation`` and
    ``received_at``, and the served index's copy (``title``, ``text`` and ``chunk_id`` of the first
    chunk, ``metadata``) when the served index holds the document."""

    doc_id: str
    tenant_id: str
    receipt: str | None = None
    operation: InboxOperation | None = None
    received_at: str | None = None
    title: str | None = None
    text: str | None = None
    chunk_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    detail: str
    error: str  # the core's exception class (ControlTagError, FilterError), else the HTTP status phrase
    reason: str | None = None  # POST /documents: the (first) quarantined record's reason
    errors: list[dict[str, Any]] | None = None  # schema violations, one per field




def unstorable(value: Any) -> str | None:
    """What Python's JSON parser accepts but JSON, Parquet and the engines do not: NaN and
    Infinity, and ``\\ud800``-style escapes that decode to lone UTF-16 surrogates."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a JSON number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a \\u escape encodes a lone UTF-16 surrogate, which is not text"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        problem = (unstorable(key) if isinstance(key, str) else None) or unstorable(item)
        if problem:
            return problem
    return None
