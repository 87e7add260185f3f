"""`flywheel demo`: the main job. The closed loop on the local stack, with a result table."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from flywheel.console import err, out
from flywheel.demo.agent import AGENT_ENVIRONMENTS
from flywheel.demo.loop import Demo, DemoOptions, DemoStatus
from flywheel.demo.results import RunResults
from flywheel.isolation import require_model_code_isolation
from flywheel.options import Duration
from flywheel.platform import ensure_infrastructure
from flywheel.report import write_report
from flywheel.report.html import (
    AGENT_COLUMNS,
    COLUMNS,
    agent_cells,
    agent_headline_text,
    headline_text,
    pass_at_k_text,
    version_cells,
)
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from simulator import DEFAULT_CONFIG_PATH


def _status_line(st: DemoStatus, versions: int) -> str:
    lag = "/".join("?" if x is None else f"{x:,}" for x in (st.joiner_lag, st.sink_lag))
    canary = f", canary v{st.canary}" if st.canary is not None else ""
    tab = (
        f" | {st.requests:,} requests, {st.events_per_s:,.0f} events/s | production "
        f"v{st.production}{canary} | decided {st.decided}/{versions}, last: {st.last_decision}"
        if st.requests or not st.agent
        else ""
    )
    agent = f" | {st.agent}" if st.agent else ""
    return f"{st.elapsed_s / 60:4.1f} min | lag joiner/sink {lag}{tab}{agent}"


def _periodic(versions: int, every_s: float = 15.0) -> Callable[[DemoStatus], None]:
    last = 0.0

    def show(st: DemoStatus) -> None:
        nonlocal last
        if st.elapsed_s - last >= every_s:
            last = st.elapsed_s
            err.print(_status_line(st, versions), highlight=False, soft_wrap=True)

    return show


def result_table(results: RunResults) -> Table:
    table = Table(*COLUMNS, title=f"demo run {results.run_id} ({results.model_name})")
    for v in results.versions:
        table.add_row(*version_cells(v))
    return table


def agent_table(results: RunResults) -> Table:
    table = Table(*AGENT_COLUMNS, title=f"agent loop ({results.agent_model})")
    for v in results.agent_versions:
        table.add_row(*agent_cells(v))
    return table


DEMO_LAKE = "s3://flywheel/lake"
DEMO_WINDOWS = "s3://flywheel/windows"


def demo_storage(settings: Settings, storage: str) -> Settings:
    """The demo's settings with `--storage store`: the lake and the windows in the local
    stack's object store unless FLYWHEEL_LAKE / FLYWHEEL_WINDOWS say otherwise. Set in this
    process's environment, which the demo's workers inherit."""
    if storage != "store" or not settings.uses_local_stack:
        return settings
    defaults = {"FLYWHEEL_LAKE": DEMO_LAKE, "FLYWHEEL_WINDOWS": DEMO_WINDOWS}
    for name, value in defaults.items():
        if not os.environ.get(name):
            os.environ[name] = value
    return Settings.from_env()


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=DEFAULT_CONFIG_PATH,
    show_default="the default simulator config",
    help="Simulator parameters (YAML), e.g. another hidden user model.",
)
@click.option(
    "--versions",
    default=6,
    show_default=True,
    type=click.IntRange(1),
    help="Stop once this many model versions are decided (promoted, failed or rolled back).",
)
@click.option(
    "--budget",
    "budget_s",
    default="15m",
    show_default=True,
    type=Duration(30),
    help="...or after this long (wall time).",
)
@click.option(
    "--rate",
    "rate_per_s",
    default=200.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Simulated suggestion requests per second.",
)
@click.option(
    "--model",
    "model_name",
    default=None,
    help="Model name to train and serve. Default: gate-<run id>, a fresh model per run.",
)
@click.option(
    "--learner-arg",
    "learner_args",
    multiple=True,
    metavar="OPTION",
    help="Extra `flywheel learn` option (repeatable), e.g. --learner-arg=--min-rows=2000.",
)
@click.option(
    "--learner-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Learner recipe for `flywheel learn --config`, e.g. "
    "learner/recipes/gate/configs/with-features.yaml (its features are then also served online, "
    "from an in-process feature store).",
)
@click.option(
    "--loop",
    type=click.Choice(["tab", "agent", "both"]),
    default="both",
    show_default=True,
    help="tab: the suggestion-gate loop. agent: the agent LM's loop (warm-up, rollout workers, "
    "RL learner; with --agent-env program-synthesis also serving and its users). both: the two "
    "together.",
)
@click.option(
    "--agent-versions",
    default=10,
    show_default=True,
    type=click.IntRange(2),
    help="Stop the agent loop once this many agent versions are decided (the warm-up's v1 "
    "included; a version takes about a minute on 2 cores, so the time budget usually ends it).",
)
@click.option(
    "--agent-env",
    type=click.Choice(AGENT_ENVIRONMENTS),
    default=AGENT_ENVIRONMENTS[0],
    show_default=True,
    help="The agent loop's environment: repository (episodes of tool calls that fix generated "
    "repositories; rollout workers and the RL learner) or program-synthesis (single "
    "completions; also a serving replica and simulated users whose reactions train it).",
)
@click.option(
    "--storage",
    type=click.Choice(["store", "disk"]),
    default="store",
    show_default=True,
    help="Where the lake and the training windows live. store: the local stack's S3 server "
    f"({DEMO_LAKE}, {DEMO_WINDOWS}); the sink writes there and the learners mirror the lake and "
    "publish and stream their windows, as learners on other machines do. disk: "
    "$FLYWHEEL_HOME/lake and each learner's mds/. FLYWHEEL_LAKE and FLYWHEEL_WINDOWS, when set, "
    "win over both.",
)
def demo(
    config_path: Path,
    versions: int,
    budget_s: float,
    rate_per_s: float,
    model_name: str | None,
    learner_args: tuple[str, ...],
    learner_config: Path | None,
    loop: str,
    agent_versions: int,
    agent_env: str,
    storage: str,
) -> None:
    """Run the closed loops on the local stack until enough versions are decided.

    The suggestion-gate loop (tab) starts the simulated IDE fleet (v0 heuristic policy), the
    online feature processor and the continuous gate learner; the fleet follows every model the
    learner publishes, until VERSIONS are decided. The agent loop warms the agent LM up (v1:
    the shipped warm-up of the config, or a finished one of the same config, is reused), then
    runs a rollout worker (in the repository environment: episodes of tool calls, levels moved
    by a curriculum) and the RL learner until AGENT-VERSIONS are decided; with
    --agent-env program-synthesis also a serving replica of the OpenAI API with simulated users
    whose reactions train it too. Afterwards it samples pass@1 and pass@8 before and after and
    shows one held-out episode turn by turn. Both loops share the reward joiner and the sink.
    Shows live progress; Ctrl-C stops cleanly. Prints the per-version result tables, stores the
    gate's in the lake (demo.results) and writes an HTML report. The lake, catalog and models
    stay for `flywheel query` and `flywheel models list`.
    """
    settings = demo_storage(Settings.from_env(), storage)
    run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    options = DemoOptions(
        config_path,
        versions,
        budget_s,
        rate_per_s,
        model_name or f"gate-{run_id}",
        run_id,
        learner_args,
        learner_config,
        loop=loop,
        agent_model=f"agent-{run_id}",
        agent_versions=agent_versions,
        agent_env=agent_env,
    )
    if options.agent:  # its workers run model-written code: fail closed before anything starts
        require_model_code_isolation("demo")
    with err.status("starting the platform") as status:
        ensure_infrastructure(settings, lambda msg: status.update(msg))
    stop = stop_on_signals()
    if err.is_terminal:
        with Live(console=err, refresh_per_second=2, transient=False) as live:
            results = Demo(settings, options).run(
                lambda st: live.update(_status_line(st, versions)), stop
            )
    else:  # a log file or CI: a status line every few seconds instead of a redrawn one
        results = Demo(settings, options).run(_periodic(versions), stop)
    # Off a terminal rich assumes 80 columns, too narrow for the table: print it 150 wide.
    wide = out if out.is_terminal else Console(width=150)
    if options.tab:
        wide.print(result_table(results))
        out.print(headline_text(results))
    if options.agent:
        wide.print(agent_table(results))
        out.print(agent_headline_text(results))
        if results.agent_pass_at_k:
            out.print(f"Agent, sampled: {pass_at_k_text(results)}")
    page = write_report(results, settings.home / "demo" / run_id / "report")
    out.print(f"report: {page}")
    sql = '"select * from demo_results"'  # a fixed string, not built SQL
    lake = "" if settings.lake_on_disk else f"--lake {settings.lake_uri} "
    hint = "flywheel query " + lake + sql
    model = options.model_name if options.tab else options.agent_model
    out.print(f"next: flywheel models list --model {model}   |   {hint}")
