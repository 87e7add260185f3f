"""Listing output, one way for every listing command (docs/cli.md): a rich table on a terminal,
one tab-separated line per record otherwise (a pipe or a file: nothing wrapped or cut), one JSON
array of records with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import click
from rich.markup import escape
from rich.table import Table

from flywheel.console import err, out

F = TypeVar("F", bound=Callable[..., Any])


def json_option(f: F) -> F:
    """``--json`` (parameter ``as_json: bool``): the records as one JSON array."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the records as one JSON array of objects (for scripts).",
    )(f)


def cell_text(value: Any) -> str:
    """How a record value prints in a table: None as ``-``, lists comma-joined, datetimes in
    ISO 8601 with their zone, floats with 6 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, list | tuple):
        return ", ".join(cell_text(v) for v in value) or "-"
    return str(value)


@dataclass(frozen=True)
class Column:
    """One column: ``key`` names the record field (and the JSON key); ``header`` the table
    heading (default: the key); ``text`` turns a value into its table text; ``styles`` colors
    a printed text on a terminal (e.g. ``{"missing": "red"}``)."""

    key: str
    header: str | None = None
    text: Callable[[Any], str] = cell_text
    styles: Mapping[str, str] = field(default_factory=dict)


def _plain(text: str) -> str:
    # A record stays on one line and in its columns, whatever its values hold.
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def print_records(
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    *,
    as_json: bool,
    title: str | None = None,
) -> None:
    """Print ``records`` (JSON-able mappings; datetimes are written in ISO 8601) as a rich
    table on a terminal, as a header line and one tab-separated line per record when stdout is
    not one, or, with ``as_json``, as one JSON array of the whole records."""
    if as_json:
        click.echo(json.dumps(list(records), default=_json_default))
        return
    headers = [c.header or c.key for c in columns]
    if not out.is_terminal:
        click.echo("\t".join(headers))
        for record in records:
            click.echo("\t".join(_plain(c.text(record.get(c.key))) for c in columns))
        return
    table = Table(*headers, title=title)
    table.columns[0].no_wrap = True  # names stay whole and greppable
    for record in records:
        cells = []
        for c in columns:
            text = c.text(record.get(c.key))
            style = c.styles.get(text)
            cells.append(f"[{style}]{escape(text)}[/]" if style else escape(text))
        table.add_row(*cells)
    out.print(table)


def note(text: str, *, as_json: bool = False) -> None:
    """A line about a listing (a summary, a hint): on stdout under a terminal's table, on
    stderr when stdout is a pipe or JSON, so that stdout holds only the records."""
    console = out if out.is_terminal and not as_json else err
    console.print(text, highlight=False, soft_wrap=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
