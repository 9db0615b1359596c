"""The document routes: ``POST /documents``, ``DELETE /documents/{id}`` and ``GET /documents/{id}``.

Posted records are cleaned by the catalog's own rules and checked against the published record
schema; all are appended to the document inbox in one write, or none if any would be
quarantined. Statuses follow the served version (see ``core.ingest.inbox``).
"""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.ingest.catalog import CatalogFormat, RawRow
from retrieval_assets.core.ingest.cleaning import clean_one
from retrieval_assets.core.ingest.inbox import (
    ArchivedEntry,
    DocumentInbox,
    DocumentStatus,
    InboxEntry,
    InboxOperation,
    InboxOutcome,
    document_status,
)
from retrieval_assets.core.models import Document, QuarantineRecord, StoreHit
from retrieval_assets.core.retrieval.service import SearchService
from retrieval_assets.serving.auth import ApiKey, Authorizer
from retrieval_assets.serving.errors import Quarantined
from retrieval_assets.serving.schemas import (
    MAX_DOCUMENT_BATCH,
    MAX_DOCUMENT_BYTES,
    RECORD_MODELS,
    DocumentReceipt,
    DocumentsAccepted,
    DocumentTenantParam,
    DocumentView,
    ErrorBody,
    documents_body_schema,
)


def document_routes(
    service: SearchService,
    inbox: DocumentInbox,
    versions: IndexVersions | None,
    caller: Authorizer,
    catalog_format: CatalogFormat,
    default_tenant: str,
) -> APIRouter:
    """The document routes over ``inbox``; statuses follow ``versions``' promoted version (with
    none, an entry taken in counts as applied when the index does, or for a delete does not,
    hold the document)."""
    router = APIRouter()

    def status_of(entry: InboxEntry, served: bool) -> DocumentStatus:
        if versions is not None:
            return document_status(entry, versions.promoted())
        # No versions to compare with: whether the index holds the document says if the entry is applied.
        if isinstance(entry, ArchivedEntry):
            applied = entry.outcome is not InboxOutcome.REJECTED
            if applied and served == (entry.outcome is InboxOutcome.INDEXED):
                return DocumentStatus(status=entry.outcome.value)
        return document_status(entry, None)

    @router.post(
        "/documents",
        status_code=202,
        response_model=DocumentsAccepted,
        tags=["documents"],
        max_body_size=MAX_DOCUMENT_BYTES,
        responses={
            202: {"description": "queued: one receipt per record"},
            422: {
                "model": ErrorBody,
                "description": "a record would be quarantined (`reason`; one `errors` item per such record, "
                "`loc` [\"body\", index] in an array), breaks the record schema, or the array is empty or too "
                "long: nothing is written",
            },
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": f"One catalog record in the catalog's format ({catalog_format}), or an array of 1 to "
                f"{MAX_DOCUMENT_BATCH:,} of them; at most {MAX_DOCUMENT_BYTES:,} bytes in all. A later record "
                "for the same id supersedes an earlier one.",
                "content": {"application/json": {"schema": documents_body_schema(RECORD_MODELS[catalog_format])}},
            }
        },
    )
    async def post_documents(
        request: Request,
        key: Annotated[ApiKey | None, Depends(caller("documents:write"))],
        tenant: DocumentTenantParam = None,
    ) -> DocumentsAccepted:
        """Clean each record as the catalog is cleaned and queue them all for the next build, or none
        if any would be quarantined; one receipt per record, in order."""
        tenant_id = key.write_tenant(tenant, default_tenant) if key else tenant or default_tenant
        rows, batch = _document_rows(await request.body())
        # Each record alone: a later record for the same id supersedes an earlier one, as a later post does.
        cleaned = await run_in_threadpool(lambda: [clean_one(row, catalog_format, tenant_id) for row in rows])
        rejected = [result for result in cleaned if isinstance(result, QuarantineRecord)]
        if rejected:
            raise Quarantined(rejected, batch)
        documents = [result for result in cleaned if isinstance(result, Document)]
        records = [json.loads(row.raw) for row in rows]
        _check_records(RECORD_MODELS[catalog_format], records, batch)
        entries = [
            InboxEntry.new(
                InboxOperation.UPSERT,
                document.doc_id,
                tenant_id,
                format=catalog_format,
                record=record,
                sender=key.id if key else None,
            )
            for document, record in zip(documents, records, strict=True)
        ]
        await run_in_threadpool(inbox.append, entries)
        return DocumentsAccepted(receipts=[DocumentReceipt.model_validate(entry.model_dump()) for entry in entries])

    @router.delete(
        "/documents/{doc_id:path}",
        status_code=202,
        response_model=DocumentsAccepted,
        tags=["documents"],
        responses={
            404: {"model": ErrorBody, "description": "neither the served index nor the inbox holds the document"}
        },
    )
    def delete_document(
        doc_id: str,
        key: Annotated[ApiKey | None, Depends(caller("documents:write"))],
        tenant: DocumentTenantParam = None,
    ) -> DocumentsAccepted:
        """Queue the document's removal for the next build. It must be served, or live in the inbox
        (its latest entry an upsert, pending or indexed)."""
        tenant_id = key.write_tenant(tenant, default_tenant) if key else tenant or default_tenant
        latest = inbox.latest(doc_id, tenant_id)
        live = (
            latest is not None
            and latest.operation is InboxOperation.UPSERT
            and (not isinstance(latest, ArchivedEntry) or latest.outcome is InboxOutcome.INDEXED)
        )
        if not live and service.fetch_document(doc_id, tenant_id) is None:
            raise _no_document(doc_id, tenant_id)
        entry = InboxEntry.new(InboxOperation.DELETE, doc_id, tenant_id, sender=key.id if key else None)
        inbox.append([entry])
        return DocumentsAccepted(
            receipts=[DocumentReceipt.model_validate(entry.model_dump())],
            message="accepted; the next index build removes it",
        )

    @router.get(
        "/documents/{doc_id:path}",
        response_model=DocumentView,
        tags=["documents"],
        responses={
            404: {"model": ErrorBody, "description": "neither the served index nor the inbox holds the document"}
        },
    )
    def get_document(
        doc_id: str, key: Annotated[ApiKey | None, Depends(caller("search"))], tenant: DocumentTenantParam = None
    ) -> DocumentView:
        """The status of the document's latest inbox entry (pending; indexed or deleted in the
        promoted version; rejected with the quarantine reason), else ``indexed`` when only the
        served index holds it; with the served index's copy when it has one."""
        if key is not None and tenant is not None:
            key.check_tenant(tenant)
        tenants = [tenant] if tenant is not None else key.tenants if key is not None else None
        entry = inbox.latest(doc_id, tenants)
        hit = service.fetch_document(doc_id, entry.tenant_id if entry else tenants)
        served = _served_copy(hit) if hit else {}
        if entry is not None:
            status = status_of(entry, served=hit is not None)
            inbox_fields = {"receipt": entry.receipt, "operation": entry.operation, "received_at": entry.received_at}
            return DocumentView(
                **status.model_dump(),
                **{**served, **inbox_fields, "doc_id": entry.doc_id, "tenant_id": entry.tenant_id},
            )
        if hit is None:
            raise _no_document(doc_id, tenant)
        promoted = versions.promoted() if versions is not None else None
        return DocumentView(status="indexed", version=promoted.id if promoted else None, **served)

    return router


def _raw_row(body: bytes) -> RawRow:
    """The body as the catalog reader would see it as one line (BOM dropped, invalid UTF-8 flagged)."""
    body = body.removeprefix(b"\xef\xbb\xbf").strip()
    try:
        return RawRow(source="http", line_number=1, raw=body.decode("utf-8"))
    except UnicodeDecodeError:
        return RawRow(source="http", line_number=1, raw=body.decode("utf-8", errors="replace"), utf8_error=True)


def _reject_json_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _document_rows(body: bytes) -> tuple[list[RawRow], bool]:
    """The body's records as catalog rows, and whether the body was an array of them. Anything
    but a well-formed array is one record, which cleaning then judges (malformed_json, ...)."""
    row = _raw_row(body)
    if row.utf8_error or not row.raw.startswith("["):
        return [row], False
    try:
        records = json.loads(row.raw, parse_constant=_reject_json_constant)
    except (ValueError, RecursionError):
        return [row], False
    if not records:
        raise HTTPException(422, "the array holds no records")
    if len(records) > MAX_DOCUMENT_BATCH:
        raise HTTPException(422, f"at most {MAX_DOCUMENT_BATCH:,} records per request, got {len(records):,}")
    rows = [
        RawRow(source="http", line_number=n, raw=json.dumps(record, ensure_ascii=False))
        for n, record in enumerate(records, start=1)
    ]
    return rows, True


def _check_records(model: type[BaseModel], records: list[Any], batch: bool) -> None:
    """Refuse what cleaning takes but the published record schema does not, so that the schema
    is exactly what is accepted."""
    errors = []
    for index, record in enumerate(records):
        try:
            model.model_validate(record)
        except ValidationError as exc:
            where = ("body", index) if batch else ("body",)
            errors += [{"loc": (*where, *e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    if errors:
        raise RequestValidationError(errors)


def _served_copy(hit: StoreHit) -> dict[str, Any]:
    """DocumentView's fields from the served index's first chunk of the document."""
    payload = dict(hit.payload)
    fields = {key: payload.pop(key) for key in ("doc_id", "tenant_id", "title", "text", "chunk_id")}
    payload.pop("section", None)
    return {**fields, "metadata": payload}


def _no_document(doc_id: str, tenant: str | None) -> HTTPException:
    # The same answer for another tenant's document as for none at all.
    return HTTPException(404, f"no document {doc_id!r}" + (f" for tenant {tenant!r}" if tenant else ""))
