"""Logging for every Flywheel process: one root handler, text or JSON lines, secrets masked.

``flywheel --log-format json --log-level info <command>`` (env FLYWHEEL_LOG_FORMAT,
FLYWHEEL_LOG_LEVEL) calls :func:`configure_logging` before the command runs. A JSON line holds
``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``service`` and every ``extra=``
field of the call; an exception adds ``exception``. Whatever the format, the values of secret
settings (Kafka passwords and other secret keys of ``Settings.kafka_client_config()``, the
pseudonym key, a password in the registry URL) are replaced by ``****`` wherever they appear in
a message, an exception or an extra field.

Human status lines go through ``flywheel.console``, not logging: they are unaffected.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO
from urllib.parse import urlsplit

from flywheel.errors import LoggingConfigError, SettingsError
from flywheel.settings import MASK, Settings, is_secret

FORMAT_ENV = "FLYWHEEL_LOG_FORMAT"
LEVEL_ENV = "FLYWHEEL_LOG_LEVEL"
FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
_LEVEL_NUMBERS = {
    **{name: logging.getLevelNamesMapping()[name.upper()] for name in LEVELS},
    "warn": logging.WARNING,
    "crit": logging.CRITICAL,
}

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class SecretMask(logging.Filter):
    """Replaces each secret value in a record's message, arguments, exception text and string
    extra fields by the mask. As a handler filter it sees every record the handler writes."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def mask(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        record.msg, record.args = self.mask(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRS and isinstance(value, str):
                setattr(record, name, self.mask(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, service, extras, exception."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "service": self.service,
        }
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRS and name not in line:
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, default=str, ensure_ascii=False)


def secret_values(settings: Settings) -> list[str]:
    """The values logs must never show: secret Kafka client settings, the pseudonym key (set,
    or generated under FLYWHEEL_HOME by ``flywheel.clients.pseudonymizer``) and a password in
    the registry URL."""
    values = [v for k, v in settings.kafka_client_config().items() if is_secret(k) and v]
    if settings.pseudonym_key:
        values.append(settings.pseudonym_key)
    generated = settings.home / "secrets" / "pseudonym.key"  # read, never created, here
    with contextlib.suppress(OSError):
        values.append(generated.read_text().strip())
    password = urlsplit(settings.registry_url).password
    if password:
        values.append(password)
    return [v for v in values if v]


def env_secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """:func:`secret_values` of the environment's settings; when they do not parse (the command
    will report why), the secret-looking FLYWHEEL_* values themselves."""
    env = os.environ if env is None else env
    try:
        return secret_values(Settings.from_env(env))
    except SettingsError:
        return [v for k, v in env.items() if k.startswith("FLYWHEEL_") and is_secret(k) and v]


class _FlywheelHandler(logging.StreamHandler[TextIO]):
    """The handler configure_logging installs (a second call replaces it). Without a stream it
    writes to the current ``sys.stderr`` (one a test runner swapped in and closed is not kept)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    fmt: str = "text",
    level: str = "warning",
    *,
    service: str = "flywheel",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Install one root handler writing ``fmt`` lines (text or json) at ``level`` and above to
    ``stream`` (default stderr), masking ``secrets``. Replaces a handler an earlier call
    installed (and, for text, leaves no duplicate of a basicConfig one); handlers others added
    (pytest's) stay. Raises LoggingConfigError on an unknown format or level."""
    if fmt not in FORMATS:
        raise LoggingConfigError(f"log format {fmt!r}: use one of {', '.join(FORMATS)}")
    number = _LEVEL_NUMBERS.get(level.lower())
    if number is None:
        raise LoggingConfigError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _FlywheelHandler)]:
        root.removeHandler(old)
    handler = _FlywheelHandler(stream)
    handler.addFilter(SecretMask(secrets))
    handler.setFormatter(
        JsonFormatter(service) if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root.addHandler(handler)
    root.setLevel(number)
    return handler


def ensure_logging(service: str) -> None:
    """For a command run outside the ``flywheel`` group (a test script calling it directly): set
    up logging from FLYWHEEL_LOG_FORMAT / FLYWHEEL_LOG_LEVEL unless the root logger has handlers."""
    if not logging.getLogger().handlers:
        configure_logging(
            os.environ.get(FORMAT_ENV) or "text",
            os.environ.get(LEVEL_ENV) or "warning",
            service=service,
            secrets=env_secret_values(),
        )


def json_logging() -> bool:
    """True when configure_logging installed a JSON handler (faust must not replace it)."""
    return any(
        isinstance(h, _FlywheelHandler) and isinstance(h.formatter, JsonFormatter)
        for h in logging.getLogger().handlers
    )
