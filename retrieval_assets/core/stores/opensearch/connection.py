"""How to reach OpenSearch: the settings, the client, and which errors are worth a retry.

Credentials come from ``OpenSearchSettings`` (the Dagster layer fills it from ``EnvVar``); they
are ``SecretStr``, so no repr, log line or error message shows them.
"""

from __future__ import annotations

from typing import Any, Self
from urllib.parse import urlparse

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import SSLError, TransportError
from pydantic import BaseModel, ConfigDict, SecretStr, model_validator


class OpenSearchSettings(BaseModel):
    """How to reach the cluster. Secrets are ``SecretStr``: masked in repr, logs and errors."""

    model_config = ConfigDict(frozen=True)

    url: str
    username: str | None = None
    password: SecretStr | None = None
    api_key: SecretStr | None = None
    # TLS: verify against the system store, or ``ca_certs`` (a PEM file) when given.
    verify_certs: bool = True
    ca_certs: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    timeout_s: float = 30.0

    @model_validator(mode="after")
    def _check(self) -> Self:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("OpenSearch url must look like https://host:9200")
        if parsed.username or parsed.password:
            raise ValueError("put OpenSearch credentials in username/password, not in the url")
        if (self.username is None) != (self.password is None):
            raise ValueError("OpenSearch basic auth needs both username and password")
        if self.username is not None and self.api_key is not None:
            raise ValueError("use either basic auth or an API key for OpenSearch, not both")
        return self


def connect(settings: OpenSearchSettings, **client_options: Any) -> OpenSearch:
    """A client for ``settings``. Retries are the stores' (with backoff), so the transport's own
    immediate retries are off. ``client_options`` go to ``OpenSearch`` (e.g. ``connection_class``)."""
    headers = {}
    if settings.api_key is not None:
        # OpenSearch 3.7+ API keys: the token goes as is, unlike Elasticsearch's id:key pairs.
        headers["authorization"] = f"ApiKey {settings.api_key.get_secret_value()}"
    auth = None
    if settings.username is not None and settings.password is not None:
        auth = (settings.username, settings.password.get_secret_value())
    options: dict[str, Any] = {
        "hosts": [settings.url],
        "http_auth": auth,
        "headers": headers,
        "verify_certs": settings.verify_certs,
        "ca_certs": settings.ca_certs,
        "client_cert": settings.client_cert,
        "client_key": settings.client_key,
        "timeout": settings.timeout_s,
        "max_retries": 0,
        "retry_on_status": (),
        "http_compress": True,
    }
    options.update(client_options)
    return OpenSearch(**options)


def transient_wait(exc: Exception) -> float | None:
    """0 (retry after the policy's backoff) for 429, 5xx and connection errors; None otherwise."""
    if isinstance(exc, SSLError):
        return None  # a certificate problem does not go away by waiting
    if isinstance(exc, OpenSearchConnectionError):
        return 0.0
    status = exc.status_code if isinstance(exc, TransportError) else None
    return 0.0 if isinstance(status, int) and (status == 429 or status >= 500) else None
