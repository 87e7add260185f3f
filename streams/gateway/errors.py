"""Errors of the HTTP ingestion gateway.

`RequestRefused` subclasses carry the HTTP status a whole request is answered with;
`EventRefused` refuses one event of a batch (the rest of the batch goes on); `KeyStoreError` is a
user error of key management (the CLI prints it with its fix).
"""

from __future__ import annotations

from typing import Literal

from ground.errors import FlywheelError

# Why one event was refused; also the `reason` label of the refusal metric (a bounded set).
ReasonCode = Literal["malformed", "unknown_type", "invalid", "forbidden", "unavailable", "internal"]


class GatewayError(FlywheelError):
    """Root of the gateway's errors."""


class RequestRefused(GatewayError):
    """The whole request is refused with `status`; the message is the client-facing reason."""

    status: int = 400


class MalformedBody(RequestRefused):
    """The body is not JSON / NDJSON of event objects (400)."""

    status = 400


class BodyTooLarge(RequestRefused):
    """The body or its event count exceeds the gateway's limit (413)."""

    status = 413


class UnsupportedMediaType(RequestRefused):
    """The Content-Type or Content-Encoding is not one the gateway reads (415)."""

    status = 415


class EventRefused(GatewayError):
    """One event cannot be accepted; `code` classifies why, the message says what to fix."""

    def __init__(self, code: ReasonCode, message: str) -> None:
        super().__init__(message)
        self.code: ReasonCode = code


class KeyStoreError(GatewayError):
    """The API key file is unreadable, or a key operation names a key wrongly."""


class KeyRefused(GatewayError):
    """A request's API key is missing, unknown or revoked, or cannot be checked now: answer
    `status` (401, 403 or 503) with the message and `headers` (a challenge, a Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
