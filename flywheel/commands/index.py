"""`flywheel index sync|search|status|erase`: the codebase index's client (docs/index.md).

Light: runs on the SDK install (codeindex.client is stdlib + httpx). The server is
`flywheel index serve`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codeindex.client import lifecycle
from codeindex.client.ranking import LEXICAL_WEIGHT
from codeindex.client.search import DEFAULT_TOP_K, MAX_TOP_K, search
from codeindex.client.sync import SyncReport, sync
from flywheel.commands.index_server import DEFAULT_PORT, serve
from flywheel.console import err
from flywheel.options import ByteSize
from flywheel.tables import Column, json_option, note, print_records

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
API_KEY_ENV = "FLYWHEEL_API_KEY"

F = TypeVar("F", bound=Callable[..., Any])


def _server_options(f: F) -> F:
    f = click.option(
        "--api-key",
        envvar=API_KEY_ENV,
        default=None,
        help=f"Bearer key of the index server (env {API_KEY_ENV}); none for a server without auth.",
    )(f)
    return click.option(
        "--url",
        default=DEFAULT_URL,
        show_default=True,
        help="Base URL of the index server (`flywheel index serve`).",
    )(f)


_workspace = click.argument(
    "path", type=click.Path(exists=True, file_okay=False, path_type=Path), default="."
)


@click.group()
def index() -> None:
    """The codebase index: sync a workspace's Merkle tree of hashes and search it semantically.

    Paths reach the server obfuscated and code only as the text of new chunks, which the server
    embeds and drops; search results are read back from your own disk (docs/index.md).
    PATH defaults to the current folder.
    """


index.add_command(serve)


@index.command("sync")
@_workspace
@_server_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="Only compare with the server (read-only calls) and say what would be sent.",
)
@click.option(
    "--max-file-size",
    type=ByteSize(),
    default="1MiB",
    show_default=True,
    help="Skip files bigger than this (e.g. 512KiB, 2MiB).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def sync_command(
    path: Path, url: str, api_key: str | None, dry_run: bool, max_file_size: int, as_json: bool
) -> None:
    """Sync the workspace at PATH with the index server: send the root hash, descend only where
    the server's hashes differ, upload the text of only the chunks it has not embedded.

    Honours .gitignore files, skips .git/, binary and non-UTF-8 files and files over
    --max-file-size. Progress on stderr; the report on stdout.
    """
    with _progress() as progress:
        report = sync(
            path, url, api_key, dry_run=dry_run, max_file_size=max_file_size, progress=progress
        )
    if as_json:
        click.echo(json.dumps(report.to_json()))
        return
    _print_report(report)


def _print_report(report: SyncReport) -> None:
    skipped = ", ".join(f"{n} {why}" for why, n in report.skipped.items()) or "none"
    click.echo(
        f"{report.workspace}: {report.files} files, {report.chunks} chunks "
        f"({report.files_read} files read; skipped: {skipped})"
    )
    if report.dry_run:
        if report.in_sync:
            click.echo("in sync: nothing would be sent")
            return
        click.echo(f"would send {report.files_sent} file(s), delete {report.deletes} path(s):")
        for rel in report.would_send:
            click.echo(f"  + {rel}")
        for rel in report.would_delete:
            click.echo(f"  - {rel}")
        return
    click.echo(
        f"{'in sync' if report.in_sync else 'NOT in sync'}: sent {report.files_sent} file(s), "
        f"{report.deletes} delete(s), {report.chunks_uploaded} chunk text(s); "
        f"{report.requests} request(s), {report.bytes_sent} bytes, {report.seconds:.2f} s"
    )


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback drawing bars on stderr (nothing when stderr is not a terminal)."""
    labels = {"read": "reading files", "upload": "uploading chunks"}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bars:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bars.add_task(labels.get(phase, phase), total=total)
            bars.update(tasks[phase], completed=done, total=total)

        yield update


HIT_COLUMNS = [
    Column("path"),
    Column("start"),
    Column("end"),
    Column("score", text=lambda v: f"{v:.4f}"),
    Column("text"),
]


@index.command("search")
@_workspace
@click.argument("query")
@_server_options
@click.option(
    "--top-k",
    default=DEFAULT_TOP_K,
    show_default=True,
    type=click.IntRange(1, MAX_TOP_K),
    help="Most results.",
)
@click.option(
    "--path-prefix",
    default=None,
    help="Only results under this file or folder (relative to PATH, whole path segments).",
)
@click.option(
    "--lexical-weight",
    default=LEXICAL_WEIGHT,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="BM25's share of the fused score, computed on this machine (the rest is the "
    "server's cosine similarity); 0 ranks by the server's embeddings alone.",
)
@json_option
def search_command(
    path: Path,
    query: str,
    url: str,
    api_key: str | None,
    top_k: int,
    path_prefix: str | None,
    lexical_weight: float,
    as_json: bool,
) -> None:
    """Search the synced workspace at PATH for QUERY (natural language or code).

    Ranks by a hybrid: the server's cosine similarity of embeddings, fused with BM25 that this
    machine computes from its own copy of the code (no term leaves it). Prints
    `path:start-end score` and the code of each result, read from your disk; a result whose
    file changed since the last sync is left out (sync again).
    """
    hits = search(
        path, url, api_key, query,
        top_k=top_k, path_prefix=path_prefix, lexical_weight=lexical_weight,
    )  # fmt: skip
    records = [
        {"path": h.path, "start": h.start, "end": h.end, "score": h.score, "text": h.text}
        for h in hits
    ]
    if as_json:
        print_records(records, HIT_COLUMNS, as_json=True)
        return
    for h in hits:
        click.echo(f"{h.path}:{h.start}-{h.end} {h.score:.4f}")
        click.echo(h.text.rstrip("\n"))
        click.echo()
    if not hits:
        note("no results", as_json=as_json)


STATUS_COLUMNS = [Column("source"), Column("field"), Column("value")]


@index.command("status")
@_workspace
@_server_options
@json_option
def status_command(path: Path, url: str, api_key: str | None, as_json: bool) -> None:
    """The index of the workspace at PATH: the client's state (workspace id, last synced root,
    state folder) and the server's status of it (files, chunks, embedder)."""
    local, server = lifecycle.status(path, url, api_key)
    records = [{"source": "local", "field": k, "value": v} for k, v in local.items()]
    records += [{"source": "server", "field": k, "value": v} for k, v in (server or {}).items()]
    print_records(records, STATUS_COLUMNS, as_json=as_json)
    if server is None:
        note(f"the server at {url} does not know this workspace: sync it", as_json=as_json)


@index.command("erase")
@_workspace
@_server_options
def erase_command(path: Path, url: str, api_key: str | None) -> None:
    """Erase the workspace at PATH from the index server (its files, and every embedding no
    other workspace holds), then forget the client's state for it (key, cache, workspace id)."""
    held = lifecycle.erase(path, url, api_key)
    done = f"erased {path.resolve()} from {url}" if held else f"{url} held nothing of {path}"
    click.echo(f"{done}; local state forgotten")
