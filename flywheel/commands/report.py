"""`flywheel report`: the HTML report of a demo run."""

from __future__ import annotations

from pathlib import Path

import click

from flywheel.console import out
from flywheel.demo.results import RESULTS_FILE, RunResults, latest_run
from flywheel.report import write_report
from flywheel.settings import Settings


@click.command()
@click.option(
    "--run",
    "run_id",
    default=None,
    help="Demo run id (a folder under $FLYWHEEL_HOME/demo). Default: the newest run.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write index.html and the PNGs. Default: the run's report/ folder.",
)
def report(run_id: str | None, out_dir: Path | None) -> None:
    """Write an HTML report (with PNG plots) of a `flywheel demo` run; opens without a server."""
    demo_dir = Settings.from_env().home / "demo"
    path = demo_dir / run_id / RESULTS_FILE if run_id else latest_run(demo_dir)
    results = RunResults.load(path)
    page = write_report(results, out_dir or path.parent / "report")
    out.print(f"report: {page}")
    out.print(f"open it with: xdg-open {page}   (or file://{page.resolve()} in a browser)")
