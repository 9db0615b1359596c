"""API keys (serving/auth.py) and the CLI that makes them and refuses to serve without them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from retrieval_assets.cli import main
from retrieval_assets.serving.auth import (
    KEYS_ENV,
    KEYS_FILE_ENV,
    ApiKey,
    ApiKeys,
    AuthError,
    RateLimiter,
    digest,
    is_loopback,
    new_key,
)


def _refused(keys: ApiKeys, token: str | None) -> AuthError:
    with pytest.raises(AuthError) as refused:
        keys.authenticate(token)
    return refused.value


def test_a_token_authenticates_its_key_and_nothing_else_does() -> None:
    token, key = new_key("app-alpha", ["alpha"], ["search"])
    other_token, other = new_key("app-beta", ["beta"], ["search"])
    keys = ApiKeys([key, other])
    assert keys.authenticate(token) == key and keys.authenticate(other_token) == other
    assert token.startswith("ra.app-alpha.") and len(token.rsplit(".", 1)[1]) >= 43  # 256 random bits
    secret = token.rsplit(".", 1)[1]
    forged = [
        None,
        "",
        token + "x",
        token[:-1],
        f"ra.app-beta.{secret}",
        f"xx.app-alpha.{secret}",
        "ra.app-alpha.",
        secret,
    ]
    answers = {(e.status, e.detail) for e in (_refused(keys, bad) for bad in forged)}
    # One answer for every failure: a caller learns nothing about which key ids exist.
    assert answers == {(401, "missing or unknown API key: send Authorization: Bearer <key>")}


def test_the_server_keeps_only_the_digest() -> None:
    token, key = new_key("app", ["alpha"], ["search"])
    record = json.dumps(key.model_dump())
    assert key.sha256 == digest(token) and token.rsplit(".", 1)[1] not in record


def test_scopes_and_tenants_bound_what_a_key_may_do() -> None:
    _, reader = new_key("reader", ["alpha", "beta"], ["search"])
    _, writer = new_key("writer", ["beta"], ["documents:write"])
    _, admin = new_key("admin", ["gamma"], ["admin"])
    assert reader.allows("search") and not reader.allows("documents:write")
    assert writer.allows("documents:write") and not writer.allows("search")
    assert admin.allows("search") and admin.allows("documents:write")
    # A write goes to the named tenant, else the key's only one, else the server's default tenant.
    assert writer.write_tenant(None, "default") == "beta" and writer.write_tenant("beta", "default") == "beta"
    assert reader.write_tenant(None, "alpha") == "alpha"
    with pytest.raises(AuthError) as outside:
        writer.write_tenant("alpha", "default")
    assert (outside.value.status, outside.value.detail) == (403, "tenant 'alpha' is not granted to key 'writer'")
    with pytest.raises(AuthError) as ambiguous:
        reader.write_tenant(None, "default")
    assert ambiguous.value.status == 403 and "name one of its tenants" in ambiguous.value.detail


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"keys": []}', "no API keys"),
        ('{"keys": [{"id": "a", "sha256": "abc", "tenants": ["t"], "scopes": ["search"]}]}', "keys.0.sha256"),
        (
            '{"keys": [{"id": "a", "sha256": "' + "0" * 64 + '", "tenants": [], "scopes": ["search"]}]}',
            "keys.0.tenants",
        ),
        (
            '{"keys": [{"id": "a", "sha256": "' + "0" * 64 + '", "tenants": ["t"], "scopes": ["read"]}]}',
            "keys.0.scopes",
        ),
        (
            '{"keys": [{"id": "a b", "sha256": "' + "0" * 64 + '", "tenants": ["t"], "scopes": ["search"]}]}',
            "keys.0.id",
        ),
        (
            '{"keys": [{"id": "a", "token": "x", "sha256": "'
            + "0" * 64
            + '", "tenants": ["t"], "scopes": ["search"]}]}',
            "token",
        ),
        ("not json", "not a valid API key list"),
    ],
)
def test_a_bad_keys_list_is_a_clear_error(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ApiKeys.parse(text, KEYS_ENV)


def test_keys_come_from_the_variable_or_the_file_not_both(tmp_path: Path) -> None:
    _, key = new_key("a", ["t"], ["search"])
    text = json.dumps({"keys": [key.model_dump()]})
    path = tmp_path / "keys.json"
    path.write_text(text)
    assert list(ApiKeys.from_environment({KEYS_ENV: text})[0]) == [key]
    assert list(ApiKeys.from_environment({KEYS_FILE_ENV: str(path)})[0]) == [key]
    assert ApiKeys.from_environment({})[0] is None
    with pytest.raises(ValueError, match="not both"):
        ApiKeys.from_environment({KEYS_ENV: text, KEYS_FILE_ENV: str(path)})
    with pytest.raises(ValueError, match="appears twice"):
        ApiKeys([key, key])


def test_the_rate_limit_refuses_with_retry_after_and_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    _, slow = new_key("slow", ["t"], ["search"], requests_per_minute=2)
    _, other = new_key("other", ["t"], ["search"], requests_per_minute=2)
    limiter.spend(slow)
    limiter.spend(slow)
    with pytest.raises(AuthError) as over:
        limiter.spend(slow)
    assert (over.value.status, over.value.retry_after) == (429, 30)  # one request every 30 s
    limiter.spend(other)  # buckets are per key
    now[0] = 29.0
    with pytest.raises(AuthError):
        limiter.spend(slow)
    now[0] = 30.5
    limiter.spend(slow)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("::", False), ("10.0.0.5", False), ("example.org", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_refuses_a_public_address_without_keys(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.delenv(KEYS_FILE_ENV, raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "refusing to bind 0.0.0.0 without API keys" in capsys.readouterr().err


def test_api_key_create_and_revoke_keep_a_private_keys_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "keys.json"
    argv = ["api-key", "create", "--id", "app", "--tenant", "alpha", "--tenant", "beta", "--scope", "search"]
    assert main([*argv, "--keys-file", str(path), "--requests-per-minute", "60"]) == 0
    token, record = capsys.readouterr().out.splitlines()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and token not in path.read_text()
    key = ApiKeys.from_environment({KEYS_FILE_ENV: str(path)})[0].authenticate(token)  # type: ignore[union-attr]
    assert key == ApiKey.model_validate_json(record)
    assert (key.tenants, key.scopes, key.requests_per_minute) == (["alpha", "beta"], ["search"], 60)
    assert main([*argv, "--keys-file", str(path)]) == 2  # the id is taken
    assert "already has a key 'app'" in capsys.readouterr().err
    assert main(["api-key", "revoke", "--id", "app", "--keys-file", str(path)]) == 0
    assert json.loads(path.read_text()) == {"keys": []}
    assert main([*argv, "--keys-file", str(path)]) == 0  # a file emptied by revoke takes a new key
    assert [key["id"] for key in json.loads(path.read_text())["keys"]] == ["app"]
