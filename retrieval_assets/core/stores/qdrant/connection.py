"""How to reach a Qdrant server: the settings, the client, retryable errors and the version floor.

Server versions: Qdrant >= 1.16 (``MIN_SERVER_VERSION``: the RRF ``k`` and collection metadata);
``check_server_version`` refuses an older one, naming both. The API key is a ``SecretStr``.
"""

from __future__ import annotations

import re
import ssl
import weakref
from typing import Any, Self

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr, model_validator
from qdrant_client import QdrantClient
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from retrieval_assets.core.stores.remote import RetryPolicy

# The oldest Qdrant this code talks to: the hybrid query's ``{"rrf": {"k": ...}}`` and collection
# ``metadata`` (where a store keeps its format) arrived in 1.16; 1.15 rejects both requests.
MIN_SERVER_VERSION = (1, 16, 0)


class QdrantServerSettings(BaseModel):
    """How to reach Qdrant. The API key is a ``SecretStr``: masked in repr, logs and errors."""

    model_config = ConfigDict(frozen=True)

    url: str
    api_key: SecretStr | None = None
    timeout_s: int = 30
    # TLS: verify against the system store, or ``ca_certs`` (a PEM file) when given.
    verify_certs: bool = True
    ca_certs: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("Qdrant url must look like http(s)://host:6333")
        if "@" in self.url.split("//", 1)[1].split("/", 1)[0]:
            raise ValueError("put the Qdrant API key in api_key, not in the url")
        return self


def connect(settings: QdrantServerSettings, **client_options: Any) -> QdrantClient:
    """A REST client for ``settings``; ``client_options`` go to ``QdrantClient`` (and on to
    httpx, e.g. ``transport``). Retries are the store's (with backoff)."""
    verify: bool | ssl.SSLContext = settings.verify_certs
    if settings.verify_certs and settings.ca_certs:
        verify = ssl.create_default_context(cafile=settings.ca_certs)
    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    options: dict[str, Any] = {"timeout": settings.timeout_s, "verify": verify, "prefer_grpc": False}
    options.update(client_options)
    return QdrantClient(url=settings.url, api_key=api_key, **options)


def transient_wait(exc: Exception) -> float | None:
    """Seconds to wait at least before retrying (Retry-After, else 0), or None: not transient."""
    if isinstance(exc, ResourceExhaustedResponse):
        return float(exc.retry_after_s)
    if isinstance(exc, UnexpectedResponse) and exc.status_code is not None:
        return 0.0 if exc.status_code == 429 or exc.status_code >= 500 else None
    if isinstance(exc, ResponseHandlingException) and isinstance(exc.source, httpx.TransportError):
        return 0.0
    return None


class UnsupportedServerError(RuntimeError):
    """The Qdrant server is older than ``MIN_SERVER_VERSION``."""


_checked_clients: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of "1.16.0", "v1.19.2", "1.20.0-rc1"; ValueError otherwise."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_server_version(client: QdrantClient, retry: RetryPolicy | None = None) -> str:
    """The server's version (``GET /``), once per client; ``UnsupportedServerError`` naming it
    and the floor when it is older than ``MIN_SERVER_VERSION``."""
    known = _checked_clients.get(client)
    if known is not None:
        return known
    policy = retry or RetryPolicy()
    version = policy.run(client.info, transient_wait, "Qdrant server version").version
    floor = ".".join(map(str, MIN_SERVER_VERSION))
    try:
        too_old = parse_version(version) < MIN_SERVER_VERSION
    except ValueError:
        too_old = True
    if too_old:
        raise UnsupportedServerError(
            f"Qdrant server runs {version}; this code needs Qdrant >= {floor} (the hybrid query's "
            "RRF with k and collection metadata): upgrade the server"
        )
    _checked_clients[client] = version
    return version


# -- the store ---------------------------------------------------------------------------------
