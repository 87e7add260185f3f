"""`flywheel process`: the reward joiner and the rollout rewarder (docs/processors.md)."""

from __future__ import annotations

import gc
import logging
import os
import signal

import click

from flywheel.console import err, out
from flywheel.logs import json_logging
from flywheel.metrics import JoinerCollector, metrics_options, start_metrics_server
from flywheel.options import (
    Duration,
    duration_text,
    resolve_topics,
    status_every_option,
    topic_option,
)
from flywheel.settings import Settings
from ground.errors import FlywheelError
from ground.metrics import service_registry
from processors.joiner.config import JoinerConfig
from processors.rewards.attribution import Windows
from processors.rewards.groups import GroupPolicy
from processors.rewards.served import FeedbackWindows
from streams.topics import COMPLETION_TOPICS, ROLLOUTS_TOPIC, TELEMETRY_TOPICS

MS = 1000
WORKER_GC_THRESHOLDS = (50_000, 20, 100)  # gc.set_threshold: see `process` (default 700, 10, 10)
# Option defaults come from the declarations (one place per setting); they import no faust.
JOINER, WINDOWS, GROUPS = JoinerConfig(), Windows(), GroupPolicy()
FEEDBACK = FeedbackWindows()


def _sources(topics: dict[str, str | None]) -> tuple[dict[str, str], dict[str, str], str]:
    """``--topic`` values → (telemetry, completion, rollouts) sources, each {topic: platform
    topic}. A kind with no topic given keeps its default (JoinerConfig's)."""
    chosen = resolve_topics(topics, (*TELEMETRY_TOPICS, *COMPLETION_TOPICS, ROLLOUTS_TOPIC))
    telemetry = {t: s for t, s in chosen.items() if s in TELEMETRY_TOPICS}
    completions = {t: s for t, s in chosen.items() if s in COMPLETION_TOPICS}
    rollouts = [t for t, s in chosen.items() if s == ROLLOUTS_TOPIC]
    if len(rollouts) > 1:
        raise click.BadParameter(
            f"one rollouts topic, not {', '.join(rollouts)}", param_hint="--topic"
        )
    return (
        telemetry or dict(JOINER.topics),
        completions or dict(JOINER.completion_topics),
        rollouts[0] if rollouts else JOINER.rollouts_topic,
    )


@click.command()
@click.option(
    "--reward-fn",
    "reward_fns",
    multiple=True,
    default=("tab@1",),
    show_default=True,
    help="Reward function id (name@version). Repeatable: one Reward per suggestion per function.",
)
@click.option(
    "--outcome-window",
    "outcome_window_s",
    default=duration_text(WINDOWS.outcome_ms / MS),
    show_default=True,
    type=Duration(0),
    help="An outcome counts within this long after the offer (event time).",
)
@click.option(
    "--edits-window",
    "edits_window_s",
    default=duration_text(WINDOWS.edits_ms / MS),
    show_default=True,
    type=Duration(0),
    help="Edits count within this long after the outcome.",
)
@click.option(
    "--tests-window",
    "tests_window_s",
    default=duration_text(WINDOWS.tests_ms / MS),
    show_default=True,
    type=Duration(0),
    help="Test runs count within this long after the offer.",
)
@click.option(
    "--allowed-lateness",
    "allowed_lateness_s",
    default=duration_text(WINDOWS.allowed_lateness_ms / MS),
    show_default=True,
    type=Duration(0),
    help="Events older than their topic's watermark minus this go to the late DLQ.",
)
@click.option(
    "--idle-after",
    "idle_s",
    default=duration_text(JOINER.idle_s),
    show_default=True,
    type=Duration(0),
    help="A telemetry topic with nothing left to read that has not advanced for this long "
    "(wall clock) stops holding back attribution, which waits for the slowest topic otherwise.",
)
@click.option(
    "--group-size",
    default=GROUPS.expected_size,
    show_default=True,
    type=click.IntRange(min=1),
    help="A rollout group is complete with this many distinct trials...",
)
@click.option(
    "--group-timeout",
    "group_timeout_s",
    default=duration_text(GROUPS.timeout_ms / MS),
    show_default=True,
    type=Duration(0.001),
    help="...or when its oldest trial is this much older than the newest (event time).",
)
@click.option(
    "--group",
    default="flywheel.joiner",
    show_default=True,
    help="Kafka consumer group (faust's app id): also the prefix of the state changelogs.",
)
@topic_option(
    "Source topics, each of the kind its schema says: telemetry (the four telemetry.* "
    "topics), served completions and their feedback (agent.completions, agent.feedback) or "
    "rollouts (rollouts.results). A kind with no --topic reads its platform topics."
)
@click.option(
    "--feedback-window",
    "feedback_window_s",
    default=duration_text(FEEDBACK.feedback_ms / MS),
    show_default=True,
    type=Duration(0),
    help="Feedback counts within this long after its completion (event time).",
)
@click.option(
    "--rewards-topic",
    default=JOINER.rewards_topic,
    show_default=True,
    help="Where the Rewards (and the rollouts' advantages) go.",
)
@click.option(
    "--late-dlq-topic",
    default=JOINER.dlq_late,
    show_default=True,
    help="Dead-letter topic for late events (behind their topic's watermark), with the reason.",
)
@click.option(
    "--dlq-topic",
    default=JOINER.dlq_joiner,
    show_default=True,
    help="Dead-letter topic for records that do not decode or validate, with the cause.",
)
@click.option(
    "--store",
    default=JOINER.store,
    show_default=True,
    help="faust table store; state is always recoverable from the changelog topics.",
)
@click.option(
    "--guarantee",
    type=click.Choice(["exactly_once", "at_least_once"]),
    default=JOINER.processing_guarantee,
    show_default=True,
    help="faust's processing guarantee. exactly_once: Kafka transactions (rewards, state and "
    "offsets commit together). at_least_once: a crash may re-emit rewards; their reward ids "
    "are deterministic, so consumers dedupe by reward_id.",
)
@click.option(
    "--session-timeout",
    "session_timeout_s",
    default=duration_text(JOINER.session_timeout_s),
    show_default=True,
    type=Duration(6),
    help="Kafka group session timeout: how long a crashed worker's partitions wait.",
)
@click.option(
    "--once-idle",
    "once_idle_s",
    default=None,
    type=Duration(0.1),
    help="Stop after this long without input (tests, demos). Default: run until stopped.",
)
@status_every_option(5.0)
@metrics_options
def process(
    reward_fns: tuple[str, ...],
    outcome_window_s: float,
    edits_window_s: float,
    tests_window_s: float,
    allowed_lateness_s: float,
    idle_s: float,
    group_size: int,
    group_timeout_s: float,
    group: str,
    topics: dict[str, str | None],
    feedback_window_s: float,
    rewards_topic: str,
    late_dlq_topic: str,
    dlq_topic: str,
    store: str,
    guarantee: str,
    session_timeout_s: float,
    once_idle_s: float | None,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Join telemetry per suggestion into Rewards, served completions with their feedback into
    Rewards, and rollout groups into advantages.

    Reads the four telemetry topics (co-partitioned by session_id), agent.completions and
    agent.feedback (likewise) and rollouts.results, keeps
    state in changelog-backed tables (a restarted worker resumes where it stopped), and writes
    Avro Rewards to the rewards topic; late events go to the late DLQ with the reason. Ctrl-C
    (or SIGTERM) stops it cleanly.
    """
    # Imported here so `--help` does not load faust and the Kafka clients.
    import faust

    from processors.joiner.app import build_app
    from processors.joiner.stats import JoinerStats
    from processors.rewards.functions import reward_functions
    from streams.security import faust_credentials

    telemetry_topics, completion_topics, rollouts_topic = _sources(topics)
    settings = Settings.from_env()
    stats = JoinerStats()
    try:
        functions = reward_functions(list(reward_fns))
        windows = Windows(
            outcome_ms=round(outcome_window_s * MS),
            edits_ms=round(edits_window_s * MS),
            tests_ms=round(tests_window_s * MS),
            allowed_lateness_ms=round(allowed_lateness_s * MS),
        )
        policy = GroupPolicy(expected_size=group_size, timeout_ms=round(group_timeout_s * MS))
        config = JoinerConfig(
            topics=telemetry_topics,
            completion_topics=completion_topics,
            rollouts_topic=rollouts_topic,
            rewards_topic=rewards_topic,
            dlq_late=late_dlq_topic,
            dlq_joiner=dlq_topic,
            store=store,
            processing_guarantee=guarantee,
            session_timeout_s=session_timeout_s,
            idle_s=idle_s,
            datadir=str(settings.home / "joiner" / "{conf.name}-data"),  # not in the cwd
        )
        (settings.home / "joiner").mkdir(parents=True, exist_ok=True)
        app = build_app(
            group,
            settings.kafka_bootstrap,
            settings.registry_url,
            functions=functions,
            windows=windows,
            group_policy=policy,
            feedback_windows=FeedbackWindows(
                feedback_ms=round(feedback_window_s * MS),
                allowed_lateness_ms=round(allowed_lateness_s * MS),
            ),
            config=config,
            stats=stats,
            broker_credentials=faust_credentials(settings.kafka_client_config()),
        )
        metrics = start_metrics_server(
            metrics_port, service_registry(JoinerCollector(stats)), metrics_host
        )
    except FlywheelError as exc:  # also when run outside the CLI group (the crash-hook script)
        raise click.ClickException(str(exc)) from exc

    @app.timer(interval=status_every_s)  # type: ignore[untyped-decorator]  # faust: bare Callable
    async def _status() -> None:
        err.print(stats.line(), highlight=False)
        if once_idle_s is not None and stats.idle_s() >= once_idle_s:
            os.kill(os.getpid(), signal.SIGTERM)  # the worker's own handler stops it cleanly

    out.print(
        f"[green]process[/] {', '.join(telemetry_topics)} + {', '.join(completion_topics)} + "
        f"{rollouts_topic} -> {rewards_topic} "
        f"(group {group}, {', '.join(reward_fns)}; late to {late_dlq_topic}, dead letters to "
        f"{dlq_topic}){'' if once_idle_s is None else f'; stops after {once_idle_s:g} s idle'}"
        "; Ctrl-C to stop",
        soft_wrap=True,
    )
    # faust replaces the root handler with its own (colored text on stdout) unless told not to:
    # JSON logs keep the one `flywheel --log-format json` installed.
    worker = faust.Worker(
        app,
        loglevel=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        quiet=True,
        redirect_stdouts=False,
        override_logging=not json_logging(),
    )
    # faust's terminal spinner sets the root logger to DEBUG (it spins on every record), which
    # makes every send build a debug LogRecord: ~8% of the worker's CPU. No spinner, no cost.
    worker.spinner = None
    # CPython's cyclic GC runs a generation-0 pass every 700 net allocations and now and then
    # walks every live object: with a suggestion table of ~10^5 documents and faust's objects
    # per record, that was ~12% of the worker's CPU. Per-record garbage is freed by reference
    # counting; cycles (futures, tracebacks) just wait longer for a pass.
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise click.ClickException(
                f"the worker stopped with status {exc.code}; rerun as "
                "`flywheel --log-level info process`"
            ) from exc
    finally:
        if metrics is not None:
            metrics.close()
    out.print(
        f"process stopped: {stats.events:,} events, {stats.rewards:,} rewards, "
        f"{stats.late:,} late, {stats.dead_letters:,} dead letters"
    )
