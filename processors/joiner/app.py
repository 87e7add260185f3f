"""The faust adapter: topics, tables and agents wired to `RewardJoiner` and `RolloutGrouper`.

One agent reads the four telemetry topics (co-partitioned by session_id, same partition count)
as raw bytes and joins them per suggestion; one reads `agent.completions` and `agent.feedback`
(also keyed by session_id) and joins them per served completion, with the same `RewardJoiner`
over a `CompletionJoin`; one reads `rollouts.results` (keyed by group_id). Their state lives in
changelog-backed tables, so a restarted worker recovers it from Kafka and resumes. Rewards are
produced Avro-encoded (Confluent wire format) keyed by session_id or group_id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import faust
from faust.serializers import codecs
from faust.types import TP
from faust.types.auth import CredentialsT

from contracts.dead_letters import DeadLetter
from processors.joiner.config import JoinerConfig
from processors.joiner.errors import JoinerError
from processors.joiner.joiner import Outputs, RewardJoiner, SourceRecord, offset_key
from processors.joiner.outbox import Outbox
from processors.joiner.rollout_groups import RolloutGrouper
from processors.joiner.state import entry_partition
from processors.joiner.stats import JoinerStats
from processors.joiner.transport import use_broker_highwaters
from processors.rewards.attribution import Windows
from processors.rewards.functions import RewardFunction
from processors.rewards.groups import GroupPolicy
from processors.rewards.joins import CompletionJoin
from processors.rewards.served import FeedbackWindows
from streams.serde import AvroCodec
from streams.topics import ROLLOUTS_TOPIC


class TableState:
    """`ChangelogState` over a faust Table with the in-memory store: values go to the store and,
    through the `Outbox`, to the changelog partition named by the caller, in the transaction of
    that source partition (faust's own `table[key] = value` needs the current event, which a
    batch of records of several partitions does not have, and goes through faust's producer
    buffer, which its exactly_once commit does not flush: see `outbox`). `source_topic`: one of
    the agent's source topics (they share a topic group, hence transactional ids)."""

    def __init__(self, table: Any, outbox: Outbox, source_topic: str) -> None:
        self._table = table
        self._outbox = outbox
        self._source_topic = source_topic
        # (changelog topic, key and value serializers): see `changelog_codec`
        self._codec: tuple[str, Callable[[Any], bytes], Callable[[Any], bytes]] | None = None

    def get(self, key: str) -> Any:
        return self._table.data.get(key)

    def put(self, partition: int, key: str, value: Any) -> None:
        self._table.data[key] = value
        self._send(partition, key, value)

    def delete(self, partition: int, key: str) -> None:
        self._table.data.pop(key, None)
        self._send(partition, key, None)

    def _send(self, partition: int, key: str, value: Any) -> None:
        if self._codec is None:  # the changelog topic exists once the app is finalized
            self._codec = changelog_codec(self._table)
        changelog, dump_key, dump_value = self._codec
        raw_key = dump_key(key)
        raw_value = None if value is None else dump_value(value)
        # The changelog partition is the source partition: recovery restores a partition's
        # state from its own changelog partition.
        self._outbox.add(
            self._source_topic, partition, changelog, raw_key, raw_value, to_partition=partition
        )

    def items(self) -> Iterable[tuple[str, Any]]:
        return list(self._table.data.items())

    def retain(self, partitions: set[int]) -> int:
        """Drop the entries of every other partition; returns how many. The joiner writes the
        table's data itself, so faust does not drop a revoked partition's keys; kept, they
        would outlive the tombstones compaction removes from the changelog, and come back as
        live state (a suggestion attributed elsewhere, attributed again) if the partition
        returns to this worker. Recovery rebuilds a returning partition from its changelog."""
        data = self._table.data
        gone = [
            key for key, raw in list(data.items()) if entry_partition(key, raw) not in partitions
        ]
        for key in gone:
            data.pop(key, None)
        return len(gone)


def changelog_codec(table: Any) -> tuple[str, Callable[[Any], bytes], Callable[[Any], bytes]]:
    """(changelog topic, key serializer, value serializer) of a faust Table: the codecs its
    own changelog writes go through (`Topic.prepare_key` -> schema -> serializer registry ->
    codec, for a table without key or value types), resolved once, so faust's recovery reads
    the joiner's records back; the registry chain cost a tenth of the joiner's batch step."""
    topic = table.changelog_topic
    if topic.key_type is not None or topic.value_type is not None:
        raise JoinerError(f"table {table.name} has typed keys or values; the joiner's are raw")
    key_codec = codecs.get_codec(table.key_serializer)
    value_codec = codecs.get_codec(table.value_serializer)
    return topic.get_topic_name(), key_codec.dumps, value_codec.dumps


def build_app(
    app_id: str,
    broker: str,
    registry_url: str,
    *,
    functions: Sequence[RewardFunction],
    windows: Windows,
    group_policy: GroupPolicy,
    feedback_windows: FeedbackWindows | None = None,
    config: JoinerConfig | None = None,
    stats: JoinerStats | None = None,
    broker_credentials: CredentialsT | None = None,
) -> faust.App:
    """A faust app running the reward joiners (suggestions; served completions within
    `feedback_windows`) and the rollout rewarder.

    `broker` is a comma-separated bootstrap list; `app_id` names the consumer group and the
    tables' changelog topics (`<app_id>-joiner-state-changelog`, ...), which faust creates.
    The source topics must exist with `config.partitions` partitions. `stats` (optional) is
    updated as records are processed, for a status line. `broker_credentials`: TLS/SASL for
    aiokafka (`streams.security.faust_credentials` of the platform's Kafka settings).
    """
    config = config or JoinerConfig()
    stats = stats if stats is not None else JoinerStats()
    app = faust.App(
        app_id,
        broker=[f"kafka://{host.strip()}" for host in broker.split(",") if host.strip()],
        broker_credentials=broker_credentials,
        datadir=config.datadir,
        store=config.store,
        topic_partitions=config.partitions,
        topic_replication_factor=1,
        processing_guarantee=config.processing_guarantee,
        web_enabled=False,
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=config.session_timeout_s / 10,
        producer_linger=config.producer_linger_s,
        producer_max_batch_size=1 << 20,  # offers with code text: ~1-2 KiB per state record
    )
    # Table recovery must know every changelog's end, and commits stop at what the workers
    # applied (`applied_next` below): transport.py.
    transport = use_broker_highwaters(app)
    raw: dict[str, Any] = {"key_serializer": "raw", "value_serializer": "raw"}

    # Outputs are queued per source partition and sent after each batch (or event) in that
    # partition's transaction: `outbox` says why not faust's send_soon.
    outbox = Outbox(app, exactly_once=config.processing_guarantee == "exactly_once")

    async def emit(source: SourceRecord, key: bytes, value: bytes) -> None:
        outbox.add(source.topic, source.partition, config.rewards_topic, key, value)

    async def send_dead_letter(source: SourceRecord, topic: str, letter: DeadLetter) -> None:
        outbox.add(source.topic, source.partition, topic, letter.key, letter.value, letter.headers)

    outputs = Outputs(emit, send_dead_letter, config.dlq_late, config.dlq_joiner, config.producer)
    codec = AvroCodec.for_url(registry_url)
    sessions = app.Table("joiner-state", default=None, partitions=config.partitions)
    groups = app.Table("rollouts-state", default=None, partitions=config.partitions)
    served = app.Table("completions-state", default=None, partitions=config.partitions)
    first_telemetry = next(iter(config.topics))
    first_served = next(iter(config.completion_topics))

    def caught_up(source_topic: str, partition: int, applied: int | None) -> bool:
        """Nothing of this input partition is left to apply: every offset below the consumer's
        high watermark (the last stable offset under read_committed) has been applied, or the
        consumer's position after a seek is already there (an empty or fully expired log)."""
        tp = TP(source_topic, partition)
        try:
            high = int(app.consumer.highwater(tp))
        except Exception:  # unknown until the first fetch response for the partition
            return False
        if high < 0:
            return False
        if (0 if applied is None else applied + 1) >= high:
            return True
        # faust's read offset of a partition is its seek position until a message is read,
        # then the offset of the last message read (< high): >= high only when nothing is left.
        read = getattr(app.consumer, "_read_offset", {}).get(tp)
        return read is not None and int(read) >= high

    joiner_state = TableState(sessions, outbox, first_telemetry)
    grouper_state = TableState(groups, outbox, config.rollouts_topic)
    joiner = RewardJoiner(
        joiner_state,
        codec,
        functions,
        windows,
        outputs,
        stats,
        idle_s=config.idle_s,
        caught_up=caught_up,
        sources={platform: source for source, platform in config.topics.items()},
    )
    grouper = RolloutGrouper(grouper_state, codec, group_policy, outputs, stats)
    served_state = TableState(served, outbox, first_served)
    served_joiner = RewardJoiner(
        served_state,
        codec,
        (),
        windows,
        outputs,
        stats,
        idle_s=config.idle_s,
        caught_up=caught_up,
        sources={platform: source for source, platform in config.completion_topics.items()},
        join=CompletionJoin(feedback_windows or FeedbackWindows()),
    )

    def lag(message: Any) -> None:
        try:
            high = int(app.consumer.highwater(message.tp))
        except Exception:  # highwater is unknown until the first fetch response: skip
            return
        stats.lag_by_partition[f"{message.topic}/{message.partition}"] = max(
            0, high - message.offset - 1
        )

    async def or_crash(sending: Awaitable[None]) -> None:
        try:
            await sending
        except JoinerError as exc:
            # Stop the worker: faust would restart just the agent, whose unsent batch would
            # stay unacked and hold its partitions' commits back forever.
            await app.crash(exc)
            raise

    async def seek_back(seeks: dict[tuple[str, int], int]) -> None:
        """Re-read the records the consumer skipped (`processors.joiner.holes`)."""
        for (topic, partition), offset in seeks.items():
            await app.consumer.seek(TP(topic, partition), offset)

    telemetry_in = app.topic(*config.topics, **raw)
    served_in = app.topic(*config.completion_topics, **raw)
    rollouts_in = app.topic(config.rollouts_topic, **raw)

    async def run_batches(
        stream: faust.StreamT[bytes], step: RewardJoiner | RolloutGrouper, topics: dict[str, str]
    ) -> None:
        """Feed `step` the stream's records in batches; `topics`: source → platform topic."""
        # StreamT does not declare take_events (faust.Stream has it).
        batches = stream.take_events(config.batch_size, config.batch_within_s)  # type: ignore[attr-defined]
        async for events in batches:
            messages = [event.message for event in events]
            await step.on_batch(
                [
                    SourceRecord(m.topic, topics[m.topic], m.partition, m.offset, m.key, m.value)
                    for m in messages
                ]
            )
            await or_crash(outbox.send())  # before faust acks the batch (after this body returns)
            await seek_back(step.take_seeks())
            last = {m.tp: m for m in messages}  # the status line's lag: one look per partition
            for m in last.values():
                lag(m)

    @app.agent(telemetry_in, name="joiner")
    async def join(stream: faust.StreamT[bytes]) -> None:
        await run_batches(stream, joiner, dict(config.topics))

    @app.agent(served_in, name="completions")
    async def join_served(stream: faust.StreamT[bytes]) -> None:
        await run_batches(stream, served_joiner, dict(config.completion_topics))

    @app.agent(rollouts_in, name="rollouts")
    async def group(stream: faust.StreamT[bytes]) -> None:
        await run_batches(stream, grouper, {config.rollouts_topic: ROLLOUTS_TOPIC})

    # faust signals an assignment before it restores the taken-over partitions' tables, and a
    # batch buffered before the rebalance may still run meanwhile (take_events yields its buffer
    # on a timer): indexes built then would hold half-restored state. So they are dropped at
    # the assignment (another worker changed these partitions) and again once recovery is done.
    def owned(*topics: str) -> set[int]:
        """Partitions of `topics` this worker holds, active or standby."""
        held = app.assignor.assigned_actives() | app.assignor.assigned_standbys()
        return {tp.partition for tp in held if tp.topic in topics}

    @app.on_partitions_assigned.connect
    async def _assigned(_sender: Any, /, *_args: Any, signal: Any, **_kwargs: Any) -> None:
        joiner.forget_deadlines()
        served_joiner.forget_deadlines()
        grouper.forget_open_groups()
        joiner_state.retain(owned(*config.topics, sessions.changelog_topic.get_topic_name()))
        served_state.retain(
            owned(*config.completion_topics, served.changelog_topic.get_topic_name())
        )
        grouper_state.retain(owned(config.rollouts_topic, groups.changelog_topic.get_topic_name()))

    # What is applied of each source partition, from the workers' offset markers: faust's
    # commits never pass it (transport.py), and the open transactions are committed with it
    # when partitions are revoked (`Outbox.commit_open` says why; faust runs that signal after
    # the agents finished their current batches and the producers were flushed).
    marker_states = {
        **{topic: joiner_state for topic in config.topics},
        **{topic: served_state for topic in config.completion_topics},
        config.rollouts_topic: grouper_state,
    }

    def applied_next(tp: TP) -> int | None:
        """The offset after the last applied record of a source partition (all below it are
        applied or accepted holes), 0 before the first; None for other topics."""
        state = marker_states.get(tp.topic)
        if state is None:
            return None
        applied = state.get(offset_key(tp.topic, tp.partition))
        return 0 if applied is None else int(applied) + 1

    transport.applied_next = applied_next

    def applied_offsets(partitions: Iterable[TP]) -> dict[TP, int]:
        return {tp: n for tp in partitions if (n := applied_next(tp))}

    @app.timer(interval=max(config.idle_s, 0.5))  # type: ignore[untyped-decorator]  # faust: bare Callable
    async def attribute_idle() -> None:
        """What became due without a record (`RewardJoiner.on_tick`), committed at once: the
        offsets are read before anything is awaited (`Outbox.commit_open`). Not while a
        rebalance or a table recovery runs: the tables then hold half-restored state."""
        if app.rebalancing or app.in_recovery:
            return
        actives = app.assignor.assigned_actives()
        queued = len(outbox)  # an agent's batch may be queued, not sent yet: it is not ours
        for step, topics in ((joiner, config.topics), (served_joiner, config.completion_topics)):
            await step.on_tick(sorted({tp.partition for tp in actives if tp.topic in topics}))
        if len(outbox) > queued:
            await or_crash(outbox.commit_open(applied_offsets(actives)))

    @app.on_partitions_revoked.connect
    async def _revoked(_sender: Any, /, *args: Any, signal: Any, **_kwargs: Any) -> None:
        revoked: set[TP] = args[0]
        await outbox.commit_open(applied_offsets(revoked))

    @app.on_rebalance_complete.connect
    async def _restored(_sender: Any, /, *_args: Any, signal: Any, **_kwargs: Any) -> None:
        joiner.forget_deadlines()
        served_joiner.forget_deadlines()
        grouper.forget_open_groups()

    return app
