"""API keys: who may call the HTTP API, for which tenants, with which scopes, how often.

A key is a bearer token ``ra.<key id>.<secret>``. The server keeps only its SHA-256, with the
key's id, the tenants it may see and write, its scopes and its rate:

    {"keys": [{"id": "app-alpha", "sha256": "<hex>", "tenants": ["alpha"],
               "scopes": ["search", "documents:write"], "requests_per_minute": 1200}]}

read from ``RETRIEVAL_ASSETS_API_KEYS`` (the JSON itself) or ``RETRIEVAL_ASSETS_API_KEYS_FILE``
(a file holding it). The secret is 256 random bits, so a fast hash is as safe as a slow one and
costs microseconds per request; the digest is compared in constant time.

Scopes: ``search`` (search, the stream, document statuses), ``documents:write`` (post and
delete documents), ``admin`` (both). ``new_key`` makes a token and its record
(``retrieval-assets api-key create``).

On the app's side, ``KeyRequired`` (ASGI middleware) answers 401 to a request without a known
key before anything reads it; ``authorizer`` is the routes' dependency that checks the key's
scope and rate, and ``granted`` bounds a search to the key's tenants.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import math
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from retrieval_assets.core.models import SearchRequest
from retrieval_assets.serving.errors import error_response

KEYS_ENV = "RETRIEVAL_ASSETS_API_KEYS"
KEYS_FILE_ENV = "RETRIEVAL_ASSETS_API_KEYS_FILE"
TOKEN_PREFIX = "ra"
DEFAULT_REQUESTS_PER_MINUTE = 1_200

Scope = Literal["search", "documents:write", "admin"]
KeyId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
Tenant = Annotated[str, Field(min_length=1, max_length=200)]


class AuthError(Exception):
    """A request the key does not allow: ``status`` 401 (no or unknown key), 403 (scope or
    tenant outside the grant) or 429 (over its rate; ``retry_after`` seconds)."""

    def __init__(self, status: int, detail: str, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class ApiKey(BaseModel):
    """One key's record: never the token, only its digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: KeyId
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    tenants: Annotated[list[Tenant], Field(min_length=1)]
    scopes: Annotated[list[Scope], Field(min_length=1)]
    requests_per_minute: Annotated[int, Field(ge=1)] = DEFAULT_REQUESTS_PER_MINUTE

    @field_validator("tenants", "scopes")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def write_tenant(self, named: str | None, default: str) -> str:
        """The tenant a write goes to: the named one, else the key's only tenant, else the server's
        default tenant; 403 unless the key is granted it."""
        if named is None and len(self.tenants) > 1 and default not in self.tenants:
            raise AuthError(
                403, f"tenant {default!r} (the default) is not granted to key {self.id!r}: name one of its tenants"
            )
        tenant = named if named is not None else self.tenants[0] if len(self.tenants) == 1 else default
        self.check_tenant(tenant)
        return tenant

    def check_tenant(self, named: str) -> None:
        if named not in self.tenants:
            raise AuthError(403, f"tenant {named!r} is not granted to key {self.id!r}")


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[ApiKey]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_key(
    key_id: str,
    tenants: Sequence[str],
    scopes: Sequence[Scope],
    requests_per_minute: int = DEFAULT_REQUESTS_PER_MINUTE,
) -> tuple[str, ApiKey]:
    """A fresh token and the record the server keeps of it."""
    token = f"{TOKEN_PREFIX}.{key_id}.{secrets.token_urlsafe(32)}"
    key = ApiKey(
        id=key_id,
        sha256=digest(token),
        tenants=list(tenants),
        scopes=list(scopes),
        requests_per_minute=requests_per_minute,
    )
    return token, key


class ApiKeys:
    """The configured keys; ``authenticate`` finds the key a bearer token belongs to."""

    def __init__(self, keys: Sequence[ApiKey]) -> None:
        if not keys:
            raise ValueError("no API keys: give at least one, or configure none to serve on loopback only")
        self._by_id: dict[str, ApiKey] = {}
        for key in keys:
            if key.id in self._by_id:
                raise ValueError(f"API key id {key.id!r} appears twice")
            self._by_id[key.id] = key

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[ApiKey]:
        return iter(self._by_id.values())

    @classmethod
    def parse(cls, text: str, source: str) -> ApiKeys:
        return cls(_records(text, source))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> tuple[ApiKeys | None, str]:
        """The keys ``KEYS_ENV`` or ``KEYS_FILE_ENV`` names (not both), and where they came from;
        ``(None, reason)`` when neither is set."""
        inline, path = environ.get(KEYS_ENV, "").strip(), environ.get(KEYS_FILE_ENV, "").strip()
        if inline and path:
            raise ValueError(f"set {KEYS_ENV} or {KEYS_FILE_ENV}, not both")
        if inline:
            return cls.parse(inline, KEYS_ENV), KEYS_ENV
        if path:
            return cls.parse(Path(path).read_text(encoding="utf-8"), path), path
        return None, f"neither {KEYS_ENV} nor {KEYS_FILE_ENV} is set"

    def find(self, token: str | None) -> ApiKey | None:
        """The key of ``token``, or None."""
        try:
            return self.authenticate(token)
        except AuthError:
            return None

    def authenticate(self, token: str | None) -> ApiKey:
        """The key of ``token``; AuthError 401 for none, a malformed one or an unknown one (the same
        answer for each, so that a caller learns nothing about which ids exist)."""
        prefix, _, rest = (token or "").partition(".")
        key_id, _, secret = rest.partition(".")
        key = self._by_id.get(key_id) if prefix == TOKEN_PREFIX and secret else None
        # Digest even for an unknown id, so that the answer takes as long either way.
        matches = hmac.compare_digest(digest(token or ""), key.sha256 if key else "0" * 64)
        if key is None or not matches:
            raise AuthError(401, "missing or unknown API key: send Authorization: Bearer <key>")
        return key


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def _records(text: str, source: str) -> list[ApiKey]:
    try:
        return _KeysFile.model_validate_json(text).keys
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{source} is not a valid API key list: {problems}") from None


def read_keys(path: Path) -> list[ApiKey]:
    """The keys of a keys file (none when it does not exist yet, or every key was revoked)."""
    return _records(path.read_text(encoding="utf-8"), str(path)) if path.exists() else []


def write_keys(path: Path, keys: Sequence[ApiKey]) -> None:
    """Write a keys file readable by its owner only (it holds digests, but names every grant)."""
    text = json.dumps({"keys": [key.model_dump() for key in keys]}, indent=2) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: ``requests_per_minute`` refill evenly, and a key may spend up to a
    minute's worth at once. In-process: each server process keeps its own buckets."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def spend(self, key: ApiKey) -> None:
        """Take one request from the key's bucket, or raise AuthError 429 with Retry-After seconds."""
        capacity = float(key.requests_per_minute)
        per_second = capacity / 60.0
        now = self._clock()
        with self._lock:
            bucket = self._buckets.setdefault(key.id, _Bucket(capacity, now))
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * per_second)
            bucket.updated = now
            if bucket.tokens < 1.0:
                wait = math.ceil((1.0 - bucket.tokens) / per_second)
                raise AuthError(429, f"key {key.id!r} is over {key.requests_per_minute} requests a minute", wait)
            bucket.tokens -= 1.0


def add_key(path: Path, key: ApiKey) -> None:
    """Add ``key``'s record to the keys file at ``path`` (created if need be)."""
    existing = read_keys(path)
    if any(other.id == key.id for other in existing):
        raise ValueError(f"{path} already has a key {key.id!r}: revoke it first")
    write_keys(path, [*existing, key])


def revoke_key(path: Path, key_id: str) -> None:
    """Remove the key ``key_id`` from the keys file at ``path``."""
    keys = read_keys(path)
    kept = [key for key in keys if key.id != key_id]
    if len(kept) == len(keys):
        raise ValueError(f"{path} has no key {key_id!r}")
    write_keys(path, kept)


# The app's side: the bearer scheme, the middleware that authenticates, the routes' dependency.

_BEARER = HTTPBearer(
    auto_error=False, scheme_name="apiKey", description="an API key (`retrieval-assets api-key create`)"
)


# What a caller without a key may read: readiness and the contract.
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})

# Per scope, the dependency a route takes to learn its caller's key (None: every caller is trusted).
Authorizer = Callable[[Scope], Callable[..., Awaitable[ApiKey | None]]]


class KeyRequired:
    """ASGI middleware: a request without a known key is answered 401 before anything reads it,
    so that such a caller gets no other answer (no 422 about its body, no 404, no 405). The key
    goes to ``request.state.api_key`` for the routes' scope and rate checks."""

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            key = self.keys.authenticate(bearer_token(Headers(scope=scope).get("authorization", "")))
        except AuthError as exc:
            await auth_error_response(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["api_key"] = key
        await self.app(scope, receive, send)


def auth_error_response(exc: AuthError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return error_response(exc.status, exc.detail, HTTPStatus(exc.status).phrase, headers=headers)


async def unauthorized(_: Request, exc: AuthError) -> JSONResponse:
    """The exception handler for ``AuthError``: 401 with ``WWW-Authenticate``, 403, 429 with ``Retry-After``."""
    return auth_error_response(exc)


def bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def authorizer(secured: bool) -> Authorizer:
    """The dependency a route takes, per scope, to learn its caller's key (authenticated by
    ``KeyRequired``) after checking the key's scope and rate; without keys, every caller is
    trusted (None)."""
    if not secured:

        async def trusted() -> None:
            return None

        return lambda _scope: trusted
    limiter = RateLimiter()

    def caller(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
        # The bearer scheme is declared here, for the OpenAPI document; the middleware checked it.
        # Async (nothing here blocks), so that it costs no hop through the thread pool.
        async def authorized(
            request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
        ) -> ApiKey:
            key: ApiKey = request.state.api_key
            if not key.allows(scope):
                raise AuthError(403, f"key {key.id!r} lacks the {scope!r} scope")
            limiter.spend(key)
            return key

        return authorized

    return caller


def granted(request: SearchRequest, key: ApiKey | None) -> SearchRequest:
    """The request within the key's tenants: naming another tenant is a 403, naming none searches
    all of the key's tenants (never every tenant)."""
    if key is None:
        return request
    if request.tenant_id is not None:
        key.check_tenant(request.tenant_id)
    return request.model_copy(update={"tenants": key.tenants})
