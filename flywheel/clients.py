"""Builds the platform's clients from settings: the one place that knows both."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from flywheel.settings import Settings
from streams.client import TelemetryClient
from streams.privacy import Pseudonymizer
from streams.serde import AvroCodec


def pseudonymizer(settings: Settings) -> Pseudonymizer:
    """From FLYWHEEL_PSEUDONYM_KEY; else a random key kept (0600) under FLYWHEEL_HOME.

    The generated key suits one machine (the local stack, the demo); a fleet of clients must
    share one key, set in FLYWHEEL_PSEUDONYM_KEY, so the same user maps to the same pseudonym.
    """
    if settings.pseudonym_key:
        return Pseudonymizer.from_secret(settings.pseudonym_key)
    key_file = settings.home / "secrets" / "pseudonym.key"
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return Pseudonymizer.from_secret(key_file.read_text().strip())


def codec(settings: Settings) -> AvroCodec:
    return AvroCodec.for_url(settings.registry_url)


def telemetry_client(
    settings: Settings,
    name: str = "ide-sdk",
    spool_dir: Path | None = None,
    *,
    linger_ms: int = 20,
    close_timeout_s: float = 10.0,
) -> TelemetryClient:
    """A TelemetryClient with its spool under `$FLYWHEEL_HOME/spool/<name>`."""
    return TelemetryClient(
        settings.kafka_client_config(),
        codec(settings),
        spool_dir or settings.home / "spool" / name,
        pseudonymizer(settings),
        linger_ms=linger_ms,
        close_timeout_s=close_timeout_s,
    )
