"""API keys of the ingestion gateway, persisted hashed in one JSON file.

A key is a random secret (`fw_` + 43 url-safe characters) shown once, when it is made; the file
keeps only its SHA-256. A plain, unsalted hash is enough here because the secrets are 256-bit
random tokens, not passwords: nothing can be guessed from a leaked file. Each key names the event
types it may send and can be revoked; a revoked key stays in the file so it is answered with 403
(known, but refused) rather than 401.

File layout (mode 0600, written atomically):
`{"version": 1, "keys": [{"name", "sha256", "event_types", "created_at", "revoked"}]}`.
The store re-reads the file when it changes on disk, so `flywheel gateway add-key/revoke-key`
take effect on a running gateway without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streams.gateway.errors import KeyRefused, KeyStoreError
from streams.gateway.parsing import GATEWAY_EVENT_TYPES

SECRET_PREFIX = "fw_"  # noqa: S105  # marks a string as a gateway key; not itself a secret
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FORMAT_VERSION = 1
log = logging.getLogger(__name__)


def default_key_path(home: Path) -> Path:
    """Where the gateway's keys live under a FLYWHEEL_HOME: `<home>/gateway/keys.json`."""
    return home / "gateway" / "keys.json"


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The secret a request presents: `Authorization: Bearer <key>`, else `X-API-Key`; None if
    neither (the gateway's and the agent API's way, so OpenAI clients' `api_key` works)."""
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None
    return headers.get("x-api-key", "").strip() or None


def check_request_key(
    keys: ApiKeyStore, headers: Mapping[str, str], realm: str = "flywheel-gateway"
) -> KeyRecord:
    """The active key a request presents, or KeyRefused: 401 (with a Bearer challenge naming
    `realm`) when it presents none or an unknown one, 403 when it is revoked, 503 when the key
    file cannot be read. The HTTP services that take the gateway's keys share this check."""
    secret = presented_key(headers)
    challenge = {"WWW-Authenticate": f'Bearer realm="{realm}"'}
    if secret is None:
        raise KeyRefused(
            401,
            "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            challenge,
        )
    try:
        key = keys.authenticate(secret)
    except KeyStoreError:
        log.exception("cannot read the API key store")
        raise KeyRefused(
            503, "the server cannot check API keys now; retry later", {"Retry-After": "5"}
        ) from None
    if key is None:
        raise KeyRefused(401, "invalid API key", challenge)
    if key.revoked:
        raise KeyRefused(403, f"API key {key.name!r} is revoked; ask for a new key")
    return key


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of a secret, the only form in which the store keeps it."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class KeyRecord:
    """One API key as stored: never the secret itself."""

    name: str
    sha256: str
    event_types: tuple[str, ...]
    created_at: datetime
    revoked: bool = False

    def allows(self, event_type: str) -> bool:
        """True when this key may send events of `event_type`."""
        return event_type in self.event_types

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "event_types": list(self.event_types),
            "created_at": self.created_at.isoformat(),
            "revoked": self.revoked,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyRecord:
        return cls(
            name=str(data["name"]),
            sha256=str(data["sha256"]),
            event_types=tuple(str(t) for t in data["event_types"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            revoked=bool(data.get("revoked", False)),
        )


class ApiKeyStore:
    """The gateway's API keys in a JSON file at `path` (created on the first `add`).

    Thread-safe within a process. A missing file is an empty store (every request gets 401).
    Writers in other processes replace the file atomically; readers pick the change up on their
    next call (the file's mtime and size are checked on each call, which costs one `stat`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._records: dict[str, KeyRecord] = {}
        self._hashes: dict[str, KeyRecord] = {}  # sha256 -> record, for authentication
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read

    def add(self, name: str, event_types: Iterable[str] | None = None) -> str:
        """Create key `name` allowed to send `event_types` (default: every type the gateway
        accepts); returns its secret, which is not stored and cannot be shown again.

        Raises KeyStoreError for a malformed or already used name or an unknown event type.
        """
        if not _NAME.fullmatch(name):
            raise KeyStoreError(
                f"key name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (it becomes the events' producer, gateway/<name>)"
            )
        types = _check_types(event_types)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        record = KeyRecord(name, hash_secret(secret), types, datetime.now(UTC))
        with self._lock:
            self._refresh()
            if name in self._records:
                raise KeyStoreError(
                    f"a key named {name!r} already exists in {self.path}; pick another name, "
                    "or revoke it and add a key under a new name"
                )
            self._write({**self._records, name: record})
        return secret

    def revoke(self, name: str) -> KeyRecord:
        """Mark key `name` revoked (idempotent); returns its record. KeyStoreError if unknown."""
        with self._lock:
            self._refresh()
            record = self._records.get(name)
            if record is None:
                known = ", ".join(sorted(self._records)) or "none"
                raise KeyStoreError(
                    f"no key named {name!r} in {self.path} (keys: {known}); "
                    "see `flywheel gateway list-keys`"
                )
            if not record.revoked:
                record = replace(record, revoked=True)
                self._write({**self._records, name: record})
            return record

    def records(self) -> list[KeyRecord]:
        """Every key, revoked ones included, in creation order."""
        with self._lock:
            self._refresh()
            return sorted(self._records.values(), key=lambda r: r.created_at)

    def authenticate(self, secret: str) -> KeyRecord | None:
        """The key whose secret is `secret`, revoked or not (check `.revoked`); None if none.

        Hashes are compared in constant time, and every stored hash is compared, so the time
        taken says nothing about which or how much of a hash matched.
        """
        candidate = hash_secret(secret)
        with self._lock:
            self._refresh()
            found: KeyRecord | None = None
            for stored, record in self._hashes.items():
                if hmac.compare_digest(stored, candidate):
                    found = record
            return found

    def _refresh(self) -> None:
        """Re-read the file if it changed since the last read. Caller holds the lock."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._set({}, None)
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        try:
            data = json.loads(self.path.read_text())
            records = [KeyRecord.from_json(item) for item in data["keys"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise KeyStoreError(
                f"cannot read the API key file {self.path}: {exc!r}; restore it from a backup, "
                "or move it away and add new keys with `flywheel gateway add-key`"
            ) from exc
        self._set({r.name: r for r in records}, seen)

    def _set(self, records: dict[str, KeyRecord], seen: tuple[int, int] | None) -> None:
        self._records = records
        self._hashes = {r.sha256: r for r in records.values()}
        self._seen = seen

    def _write(self, records: dict[str, KeyRecord]) -> None:
        """Replace the file atomically with `records` (mode 0600). Caller holds the lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = {"version": _FORMAT_VERSION, "keys": [r.to_json() for r in records.values()]}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # readers see the old file or the new one, never a mix
        self._seen = None  # re-read our own write: keeps mtime bookkeeping in one place
        self._refresh()


def _check_types(event_types: Iterable[str] | None) -> tuple[str, ...]:
    if event_types is None:
        return tuple(GATEWAY_EVENT_TYPES)
    types = tuple(dict.fromkeys(event_types))  # de-duplicated, order kept
    unknown = [t for t in types if t not in GATEWAY_EVENT_TYPES]
    if unknown or not types:
        raise KeyStoreError(
            f"unknown event type(s) {', '.join(unknown) or '(none given)'}; "
            f"the gateway accepts {', '.join(GATEWAY_EVENT_TYPES)}"
        )
    return types
