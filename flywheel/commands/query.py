"""`flywheel query`: analyst SQL over the lake's DuckDB catalog (docs/analysts.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement

from analytics.catalog import Catalog
from analytics.output import FORMATS, Format, render_text, rich_table, write_file
from analytics.query import list_views, to_arrow
from flywheel.console import out
from flywheel.options import lake_option
from flywheel.settings import Settings
from flywheel.tables import Column, note, print_records


def _read_sql(sql: str | None, sql_file: Path | None) -> str:
    if sql is not None and sql_file is not None:
        raise click.UsageError("give the SQL as an argument or with --file, not both")
    if sql_file is not None:
        text = sql_file.read_text(encoding="utf-8")
    elif sql == "-":
        text = sys.stdin.read()
    elif sql is not None:
        text = sql
    else:
        raise click.UsageError(
            'give SQL: flywheel query "select * from acceptance_by_version", --file q.sql, '
            "- to read stdin, or --views to see what there is to query"
        )
    if not text.strip():
        raise click.UsageError("the SQL is empty")
    return text


@click.command()
@click.argument("sql", required=False)
@click.option(
    "--file",
    "-f",
    "sql_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the SQL from this file.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format. csv and json (JSON lines) print to stdout unless --out is given.",
)
@click.option(
    "--out",
    "-o",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the result to this file (required for parquet).",
)
@click.option("--views", "show_views", is_flag=True, help="List the views and their columns.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --views: the views as one JSON array. (Query results: --format json.)",
)
@lake_option(stores=True)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most rows shown by --format table (csv, json and parquet get every row).",
)
def query(
    sql: str | None,
    sql_file: Path | None,
    fmt: Format,
    out_path: Path | None,
    show_views: bool,
    as_json: bool,
    lake: str | None,
    limit: int,
) -> None:
    """Run SQL against the lake's views and print the result.

    SQL comes from the argument, from --file, or from stdin when the argument is '-'.
    Examples:

      flywheel query "select * from acceptance_by_version"

      flywheel query --format csv "select * from suggestion_funnel" > funnel.csv

      flywheel query --format parquet --out rewards.parquet "select * from rewards"
    """
    settings = Settings.from_env()
    catalog = Catalog(settings.lake_store(lake))
    if show_views:
        _print_views(catalog, as_json)
        return
    if as_json:
        raise click.UsageError("--json lists --views; for query results use --format json")
    text = _read_sql(sql, sql_file)
    if fmt == "parquet" and out_path is None:
        raise click.UsageError("--format parquet needs --out PATH")
    if fmt == "table" and out_path is not None:
        raise click.UsageError("--out needs --format csv, json or parquet")
    con = catalog.connect()
    try:
        result = to_arrow(text, con=con)
    finally:
        con.close()
    if out_path is not None:
        write_file(result, fmt, out_path)
        click.echo(f"wrote {result.num_rows} rows to {out_path}", err=True)
    elif fmt == "table":
        table = rich_table(result, limit)
        # A terminal gets a table that fits it; a pipe or file gets every column at full width.
        console = out
        if not out.is_terminal:
            natural = Measurement.get(out, out.options.update_width(10_000), table).maximum
            console = Console(width=max(natural, out.width))
        console.print(table)
    else:
        click.echo(render_text(result, fmt), nl=False)


VIEW_COLUMNS = (
    Column("view"), Column("kind"), Column("description"),
    Column("columns", text=lambda cols: ", ".join(f"{c['name']} {c['type']}" for c in cols)),
)  # fmt: skip


def _print_views(catalog: Catalog, as_json: bool) -> None:
    con = catalog.connect()
    try:
        views = list_views(con, catalog)
    finally:
        con.close()
    records = [
        {"view": v.name, "kind": v.kind, "description": v.description,
         "columns": [{"name": name, "type": kind} for name, kind in v.columns]}
        for v in views
    ]  # fmt: skip
    print_records(records, VIEW_COLUMNS, as_json=as_json)
    for name, reason in catalog.skipped.items():
        note(f"[yellow]{name}[/] (analyst) left out: {escape(reason)}", as_json=as_json)
