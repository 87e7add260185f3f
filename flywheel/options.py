"""The CLI's shared option types: durations and sizes with units, topic selection (docs/cli.md).

Every command that takes a duration or a set of source topics uses these, so the spelling and
the parsing are the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?")


def parse_duration_s(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"250ms"`` or a bare number of seconds
    (``"1.5"``) → seconds. Raises ValueError naming the accepted forms."""
    match = _DURATION.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 5m, 2h, 7d, 250ms or 30")
    return float(match[1]) * _UNIT_S[match[2] or "s"]


def duration_text(seconds: float) -> str:
    """A default for ``show_default``: ``60`` → ``"60s"``, ``0.5`` → ``"500ms"``, ``3600`` →
    ``"1h"``; parses back to the same seconds."""
    for unit in ("d", "h", "m", "s"):
        if seconds >= _UNIT_S[unit] and (seconds / _UNIT_S[unit]).is_integer():
            return f"{seconds / _UNIT_S[unit]:g}{unit}"
    if seconds > 0 and (seconds * 1000).is_integer():
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


class Duration(click.ParamType):
    """A duration with a unit (``90s``, ``5m``, ``2h``, ``7d``, ``250ms``; a bare number is
    seconds), converted to float seconds, at least ``min_s``."""

    name = "duration"

    def __init__(self, min_s: float = 0.0, *, min_open: bool = False) -> None:
        self.min_s, self.min_open = min_s, min_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration_s(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        too_small = seconds <= self.min_s if self.min_open else seconds < self.min_s
        if too_small:
            bound = "more than" if self.min_open else "at least"
            self.fail(
                f"{value!r} is too short: give {bound} {duration_text(self.min_s)}", param, ctx
            )
        return seconds


DURATION = Duration()
_BYTES = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
}  # fmt: skip
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")


def parse_bytes(text: str) -> int:
    """``"128MiB"``, ``"1GB"``, ``"500kb"`` or a bare number of bytes → bytes. Raises
    ValueError naming the accepted forms."""
    match = _SIZE.fullmatch(str(text).strip().lower())
    if match is None or match[2] not in _BYTES:
        raise ValueError(f"{text!r} is not a size; write e.g. 128MiB, 1GiB, 64MB or bytes")
    return int(float(match[1]) * _BYTES[match[2]])


class ByteSize(click.ParamType):
    """A size with a unit (``parse_bytes``), converted to int bytes."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def listen_options(default_port: int) -> Callable[[F], F]:
    """``--host`` and ``--port`` of a server command (parameters ``host``, ``port``); every
    server has its own default port (docs/cli.md, "Ports")."""

    def decorate(f: F) -> F:
        f = click.option(
            "--port",
            default=default_port,
            show_default=True,
            type=click.IntRange(1, 65535),
            help="HTTP port (docs/cli.md lists every server's).",
        )(f)
        return click.option(
            "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
        )(f)

    return decorate


_LAKE_DEFAULT = "Default: FLYWHEEL_LAKE, else $FLYWHEEL_HOME/lake."


def lake_option(*, stores: bool, what: str = "") -> Callable[[F], F]:
    """`--lake`: with `stores`, a directory or an `s3://bucket/prefix` (a string the command
    resolves with `Settings.storage`); without, a local directory only, and a URI is refused
    naming docs/object-storage.md (the command works on local lakes only so far)."""
    if stores:
        return click.option(
            "--lake", "lake", default=None, metavar="DIR|s3://BUCKET/PREFIX",
            help=f"The lake{what}: a directory or an S3 prefix (docs/object-storage.md). "
            + _LAKE_DEFAULT,
        )  # fmt: skip
    return click.option(
        "--lake", "lake", type=LocalDirectory(), default=None,
        help=f"Lake directory{what}. " + _LAKE_DEFAULT,
    )  # fmt: skip


class LocalDirectory(click.Path):
    """A directory on local disk; an `s3://` (or any `://`) URI fails with the fix."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "://" in value:
            self.fail(
                f"{value} is not a local directory: this command works on a lake on local disk "
                "only so far (docs/object-storage.md lists what works on an object store)",
                param,
                ctx,
            )
        return super().convert(value, param, ctx)


def parse_topics(values: Iterable[str]) -> dict[str, str | None]:
    """``--topic`` values (``NAME``, ``NAME=SCHEMA`` or comma lists of them) → {name: schema or
    None}, in order. A name given again with a schema takes it (``--topic a --topic a=rewards``).
    Raises click.BadParameter on an empty name or schema."""
    topics: dict[str, str | None] = {}
    for value in values:
        items = [part.strip() for part in value.split(",") if part.strip()]
        if not items:
            raise click.BadParameter(f"{value!r}: name a topic")
        for item in items:
            name, sep, schema = (s.strip() for s in item.partition("="))
            if not name or (sep and not schema):
                raise click.BadParameter(f"{item!r}: write NAME or NAME=SCHEMA")
            topics[name] = schema or topics.get(name)
    return topics


def resolve_topics(topics: Mapping[str, str | None], schemas: Iterable[str]) -> dict[str, str]:
    """{name: schema or None} → {name: schema topic}, a name without a schema standing for
    itself. Raises click.BadParameter when a schema is not one of ``schemas``."""
    known = tuple(schemas)
    resolved: dict[str, str] = {}
    for name, schema in topics.items():
        schema = schema or name
        if schema not in known:
            written = name if schema == name else f"{name}={schema}"
            raise click.BadParameter(
                f"{written!r}: {schema} is not a platform topic; read another topic with a "
                f"platform topic's schema as --topic {name}=SCHEMA, SCHEMA one of "
                f"{', '.join(known)}",
                param_hint="--topic",
            )
        resolved[name] = schema
    return resolved


def topic_option(help_text: str) -> Callable[[F], F]:
    """``--topic NAME[=SCHEMA]`` (repeatable, or comma-separated): the source topics of a
    command, as the parameter ``topics: dict[str, str | None]`` (empty: the command's default).
    ``help_text`` says what the default is."""
    return click.option(
        "--topic",
        "topics",
        multiple=True,
        metavar="NAME[=SCHEMA]",
        callback=lambda _ctx, _param, values: parse_topics(values),
        help=f"{help_text} Repeatable or comma-separated; NAME=SCHEMA reads a topic (a copy, a "
        "mirror) with the schema of the platform topic SCHEMA.",
    )


def status_every_option(default_s: float) -> Callable[[F], F]:
    """``--status-every`` (parameter ``status_every_s``): how often a worker prints its status."""
    return click.option(
        "--status-every",
        "status_every_s",
        default=duration_text(default_s),
        show_default=True,
        type=Duration(0.1),
        help="Print a status line on stderr this often.",
    )


# Spellings renamed by the convention of docs/cli.md, per top-level command: still accepted (one
# release) with a warning. Renames whose meaning changed (a bare number of --budget-min was
# minutes) are not here: the old spelling fails and names its options.
DEPRECATED_SPELLINGS: dict[str, dict[str, str]] = {
    "process": {
        "--app-id": "--group", "--dlq-late": "--late-dlq-topic", "--dlq-joiner": "--dlq-topic",
        "--telemetry-topic": "--topic", "--completion-topic": "--topic",
        "--outcome-window-s": "--outcome-window", "--edits-window-s": "--edits-window",
        "--tests-window-s": "--tests-window", "--allowed-lateness-s": "--allowed-lateness",
        "--idle-s": "--idle-after", "--group-timeout-s": "--group-timeout",
        "--feedback-window-s": "--feedback-window", "--session-timeout-s": "--session-timeout",
        "--once-idle-s": "--once-idle", "--status-every-s": "--status-every",
    },
    "sink": {
        "--topics": "--topic", "--decode-as": "--topic", "--max-age-s": "--max-age",
        "--status-every-s": "--status-every",
    },
    "features": {
        "--topics": "--topic", "--flush-every-s": "--flush-every",
        "--status-every-s": "--status-every",
    },
    "serve": {"--status-every-s": "--status-every"},
    "rollouts": {"--max-new-tokens": "--max-tokens", "--status-every-s": "--status-every"},
    "agent-users": {"--status-every-s": "--status-every"},
    "doctor": {"--timeout-s": "--timeout"},
    "learn": {"--duration": "--train-duration"},
    "query": {"--max-rows": "--limit"},
}  # fmt: skip


def rewrite_deprecated(command: str, args: list[str], warn: Callable[[str], None]) -> list[str]:
    """``args`` of top-level ``command`` with each deprecated option spelling (also in the
    ``--old=value`` form) replaced by its new one; ``warn`` is called once per old spelling."""
    renames = DEPRECATED_SPELLINGS.get(command, {})
    rewritten: list[str] = []
    warned: set[str] = set()
    for arg in args:
        old, sep, value = arg.partition("=")
        new = renames.get(old)
        if new is None:
            rewritten.append(arg)
            continue
        if old not in warned:
            warned.add(old)
            warn(f"{command} {old} is deprecated; use {new} (docs/cli.md)")
        rewritten.append(f"{new}{sep}{value}")
    return rewritten
