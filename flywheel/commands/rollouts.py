"""`flywheel rollouts`: a rollout worker of the agent's inference fleet
(fleet/rollout_worker.py)."""

from __future__ import annotations

import threading
import time

import click

from contracts.advantages import DEFAULT_GROUP_SIZE
from environments.episodes import EpisodeLimits
from flywheel.console import err, out
from flywheel.isolation import require_model_code_isolation
from flywheel.metrics import RolloutCollector, metrics_endpoint, metrics_options
from flywheel.options import DURATION, duration_text, status_every_option
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from streams.topics import AGENT_TASKS_TOPIC, ROLLOUTS_TOPIC, TOOL_CALLS_TOPIC

DEFAULT_MODEL = "agent-lm"


@click.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Agent model to follow.")
@click.option(
    "--from-pool",
    "pool",
    default=None,
    metavar="ENVIRONMENT",
    help="Take tasks from ENVIRONMENT's training pool instead of the agent.tasks topic.",
)
@click.option(
    "--curriculum/--no-curriculum",
    default=True,
    show_default=True,
    help="With --from-pool: move the task mix across difficulty levels by the trials' measured "
    "pass rates (a level opens when the one below passes 30%; levels near 50% are drawn most). "
    "Off: levels uniformly.",
)
@click.option(
    "--group-size",
    default=DEFAULT_GROUP_SIZE,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Parallel trials per task (a task event's group_size wins when set).",
)
@click.option(
    "--tasks-per-batch",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Tasks generated together: tasks x group size sequences per forward pass.",
)
@click.option(
    "--temperature",
    default=0.4,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Sampling temperature of the trials (0: greedy). Near the greedy policy that the eval "
    "suite scores, a group's trials differ where its choices are close (docs/agent.md).",
)
@click.option(
    "--top-p",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="Nucleus sampling: sample from the smallest token set with this much probability.",
)
@click.option(
    "--max-tokens",
    default=24,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Most tokens generated per trial (per turn of an episode).",
)
@click.option(
    "--max-turns",
    default=EpisodeLimits.max_turns,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Most turns (tool calls) of an episode of a multi-turn environment (e.g. repository).",
)
@click.option(
    "--max-context",
    default=EpisodeLimits.max_tokens,
    show_default=True,
    type=click.IntRange(2, 1 << 20),
    help="Most tokens of an episode's context (prompt, turns and tool observations); keep it "
    "within the model's positions.",
)
@click.option(
    "--max-episode-time",
    "max_episode_time_s",
    default=duration_text(EpisodeLimits.wall_s),
    show_default=True,
    type=DURATION,
    help="Wall time of an episode: it is then scored as it stands.",
)
@click.option(
    "--tasks-topic",
    default=AGENT_TASKS_TOPIC,
    show_default=True,
    help="Where the tasks come from (unless --from-pool).",
)
@click.option(
    "--rollouts-topic",
    default=ROLLOUTS_TOPIC,
    show_default=True,
    help="Where the RolloutResults go.",
)
@click.option(
    "--tool-calls-topic",
    default=TOOL_CALLS_TOPIC,
    show_default=True,
    help="Where the episodes' ToolCallObserved events go.",
)
@click.option(
    "--group",
    default="flywheel.rollouts",
    show_default=True,
    help="Kafka consumer group on the tasks topic (workers in one group share the tasks).",
)
@click.option("--replica-id", default=None, help="Id in acks. Default: <hostname>-<pid>.")
@click.option(
    "--max-tasks",
    default=None,
    type=click.IntRange(1),
    help="Stop after this many tasks. Default: run until stopped.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sampling.")
@status_every_option(10.0)
@metrics_options
def rollouts(
    model: str,
    pool: str | None,
    curriculum: bool,
    group_size: int,
    tasks_per_batch: int,
    temperature: float,
    top_p: float,
    max_tokens: int,
    max_turns: int,
    max_context: int,
    max_episode_time_s: float,
    tasks_topic: str,
    rollouts_topic: str,
    tool_calls_topic: str,
    group: str,
    replica_id: str | None,
    max_tasks: int | None,
    seed: int,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Run groups of parallel trials of agent tasks with the model the registry points at.

    Follows MODEL's channels (hash check, hot swap, canary routing by task id, acks on
    models.acks), takes tasks from agent.tasks (or --from-pool), samples --group-size
    completions of each in one batched generate call, scores them in the sandbox in parallel
    and writes one RolloutResult per trial to rollouts.results. A task of a multi-turn
    environment (repository) runs as --group-size episodes of tool calls instead, within
    --max-turns, --max-context and --max-episode-time: one RolloutResult per episode and one
    ToolCallObserved per turn on agent.tool_calls. Waits while no version is in
    production (train one with `flywheel learn --recipe agent-sft`). Ctrl-C stops it.

    Refuses to start where model-written code cannot be isolated (bubblewrap; `flywheel doctor
    --check sandbox` says why), unless run as `flywheel --trust-model-code rollouts`.
    """
    from environments import ENVIRONMENTS
    from environments.curriculum import Curriculum
    from fleet.rollout_worker import (
        AgentPolicy,
        KafkaTaskFeed,
        RolloutWorker,
        TaskRequest,
        load_agent_policy,
        pool_tasks,
        produce_results,
        record_levels,
    )
    from fleet.subscriber import ModelSubscriber
    from flywheel.clients import codec
    from flywheel.commands.serve import default_replica_id, follow
    from ground.metrics import service_registry
    from policies.agent_sampling import SamplingParams
    from streams.topic_io import EventProducer

    settings = Settings.from_env()
    replica_id = replica_id or default_replica_id()
    avro = codec(settings)
    stop = stop_on_signals()
    require_model_code_isolation("rollouts")  # fail closed, before anything starts
    subscriber: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
        settings.kafka_client_config(), avro, model, replica_id, load_agent_policy, None
    )
    follow(subscriber, threading.Event(), stop)  # reads the channels, then follows them
    worker = RolloutWorker(
        subscriber,
        ENVIRONMENTS,
        sampling=SamplingParams(temperature, top_p, max_tokens),
        producer=f"rollouts/{replica_id}",
        seed=seed,
        limits=EpisodeLimits(max_turns, max_context, max_episode_time_s),
    )
    producer = EventProducer(settings.kafka_client_config())
    feed = None if pool else KafkaTaskFeed(
        settings.kafka_client_config(), avro, ENVIRONMENTS, group=group,
        default_group_size=group_size, topic=tasks_topic,
    )  # fmt: skip
    levels = Curriculum() if pool and curriculum else None
    pooled = pool_tasks(ENVIRONMENTS, pool, group_size, seed, curriculum=levels) if pool else None
    source = f"pool {pool}" if pool else f"topic {tasks_topic} (group {group})"
    out.print(f"[green]rollouts[/] {model} as {replica_id}: tasks from {source}, "
              f"{group_size} trials each, results to {rollouts_topic}; Ctrl-C to stop")  # fmt: skip

    def next_batch(want: int) -> list[TaskRequest]:
        if pooled is not None:
            return [next(pooled) for _ in range(want)]
        return feed.poll(want, timeout_s=1.0) if feed is not None else []

    collector = RolloutCollector(worker.stats, lambda: feed.dead_lettered if feed else 0)
    try:
        with metrics_endpoint(metrics_port, metrics_host, service_registry(collector)):
            done, last_status, waiting = 0, time.monotonic(), False
            while not stop.is_set() and (max_tasks is None or done < max_tasks):
                if subscriber.snapshot.production is None:
                    if not waiting:  # say it once
                        err.print(f"waiting for a production version of {model} "
                                  "(`flywheel learn --recipe agent-sft`)")  # fmt: skip
                    waiting = True
                    stop.wait(1.0)
                    continue
                waiting = False
                want = tasks_per_batch if max_tasks is None else min(tasks_per_batch,
                                                                     max_tasks - done)  # fmt: skip
                batch = next_batch(want)
                if not batch:
                    continue
                done_batch = worker.run_batch(batch)
                produce_results(producer, avro, done_batch.results, rollouts_topic,
                                tool_calls=done_batch.tool_calls,
                                tool_calls_topic=tool_calls_topic)  # fmt: skip
                if feed is not None:
                    feed.commit()  # after the results are acknowledged: at least once
                if levels is not None:
                    record_levels(levels, done_batch.results)
                done += len(batch)
                if time.monotonic() - last_status >= status_every_s:
                    line = worker.stats.line() + (f"; levels {levels.summary()}" if levels else "")
                    err.print(line, highlight=False)
                    last_status = time.monotonic()
    finally:
        subscriber.close()
        if feed is not None:
            feed.close()
    out.print(f"rollouts stopped: {worker.stats.line()}")
