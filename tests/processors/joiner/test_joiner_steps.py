"""The joiner's per-event steps over dict state: no broker, a fake registry."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.dead_letters import DeadLetter
from processors.joiner.joiner import Outputs, RewardJoiner, SourceRecord, watermark_key
from processors.joiner.rollout_groups import RolloutGrouper
from processors.joiner.state import DictState
from processors.joiner.stats import JoinerStats
from processors.rewards.attribution import PendingSuggestion, Windows, reward_id
from processors.rewards.functions import reward_functions
from processors.rewards.groups import GroupPolicy
from schemas.enums import Outcome
from schemas.events import EditObserved, Event, RolloutResult, SuggestionOutcome
from streams.serde import AvroCodec
from tests.registry_double import FakeRegistry
from tests.sample_events import PRODUCER, offered

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
WINDOWS = Windows(outcome_ms=2000, edits_ms=2000, tests_ms=2000, allowed_lateness_ms=1000)
TOPIC_OF = {
    "SuggestionOffered": "telemetry.suggestions",
    "SuggestionOutcome": "telemetry.outcomes",
    "EditObserved": "telemetry.edits",
    "RolloutResult": "rollouts.results",
}


def joiner_over(state: Any, h: Harness, *, idle_s: float = 0.0) -> RewardJoiner:
    """A joiner whose clock ticks on every read: with ``idle_s=0`` an input that did not move in
    this very step counts as idle, so the latest event's time drives attribution (one input)."""
    return RewardJoiner(
        state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        idle_s=idle_s, monotonic=itertools.count().__next__,
    )  # fmt: skip


def joiner_on_clock(h: Harness, now: list[float], *, idle_s: float = 2.0) -> RewardJoiner:
    """A joiner whose wall clock is ``now[0]`` (a test moves it)."""
    return RewardJoiner(
        h.state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        idle_s=idle_s, monotonic=lambda: now[0],
    )  # fmt: skip


class Harness:
    def __init__(self) -> None:
        self.codec = AvroCodec(FakeRegistry())  # type: ignore[arg-type]  # a fake registry
        self.state: dict[str, Any] = {}
        self.emitted: list[tuple[bytes, dict[str, Any]]] = []
        self.letters: list[tuple[str, DeadLetter]] = []
        self.stats = JoinerStats()
        self.offsets: dict[tuple[str, int], int] = {}

        async def emit(_source: SourceRecord, key: bytes, value: bytes) -> None:
            self.emitted.append((key, self.codec.decode("rewards", value)))

        async def dead_letter(_source: SourceRecord, topic: str, letter: DeadLetter) -> None:
            self.letters.append((topic, letter))

        self.outputs = Outputs(emit, dead_letter, "dlq.late", "dlq.joiner", "tests/joiner")
        self.joiner = joiner_over(self.state, self)
        self.grouper = RolloutGrouper(
            {}, self.codec, GroupPolicy(expected_size=3), self.outputs, self.stats
        )

    def record(self, event: Event | bytes, partition: int = 0, topic: str = "") -> SourceRecord:
        platform = topic or TOPIC_OF[event.SCHEMA_NAME]  # type: ignore[union-attr]
        value = (
            event if isinstance(event, bytes) else self.codec.encode(platform, event.to_record())
        )
        offset = self.offsets.get((platform, partition), -1) + 1
        self.offsets[platform, partition] = offset
        return SourceRecord(platform, platform, partition, offset, b"k", value)

    def feed(self, *events: Event | bytes, partition: int = 0, topic: str = "") -> None:
        for event in events:
            rec = self.record(event, partition, topic)
            step = self.grouper if rec.platform_topic == "rollouts.results" else self.joiner
            asyncio.run(step.on_event(rec))

    def rewards(self) -> dict[str, float]:
        return {str(r["reward_id"]): float(r["reward"]) for _, r in self.emitted}


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def outcome(sid: str, session: str, what: Outcome, ms: int) -> SuggestionOutcome:
    return SuggestionOutcome(
        producer=PRODUCER, event_time=at(ms), suggestion_id=sid, session_id=session,
        outcome=what, accepted_chars=1, time_to_decision_ms=ms,
    )  # fmt: skip


def tick(session: str, ms: int) -> EditObserved:
    return EditObserved(
        producer=PRODUCER, event_time=at(ms), session_id=session, chars_inserted=1,
        chars_deleted=0,
    )  # fmt: skip


def test_joiner_emits_once_per_suggestion_after_the_watermark_passes_the_deadline() -> None:
    h = Harness()
    accepted, ignored = offered("s", event_time=at(0)), offered("s", event_time=at(10))
    h.feed(outcome(accepted.suggestion_id, "s", Outcome.ACCEPTED, 500), accepted, ignored)
    h.feed(tick("s", 2500))  # deadline 2000 is not before 2500 - 1000: nothing yet
    assert h.emitted == []
    h.feed(tick("s", 3100))
    assert h.rewards() == {
        reward_id(accepted.suggestion_id, "tab@1"): 0.75,
        reward_id(ignored.suggestion_id, "tab@1"): -0.25,
    }
    assert all(key == b"s" for key, _ in h.emitted)
    # Attributed: only done markers are left, while a re-sent offer would still be on time
    # (the offers' watermark is at 10 ms); they go once the offers move on.
    assert all('"d":' in v for k, v in h.state.items() if not k.startswith("\x00"))
    h.feed(tick("s", 9000), offered("s", event_time=at(1011)))  # the latter its own Reward
    assert len(h.emitted) == 3
    assert accepted.suggestion_id not in h.state and ignored.suggestion_id not in h.state


def test_joiner_skips_records_replayed_at_or_below_the_applied_offset() -> None:
    h = Harness()
    offer = offered("s", event_time=at(0))
    rec = h.record(offer)
    asyncio.run(h.joiner.on_event(rec))
    asyncio.run(h.joiner.on_event(rec))  # a redelivery after a crash
    assert h.stats.events == 1


def test_joiner_sends_late_events_to_the_late_dlq_with_the_reason() -> None:
    h = Harness()
    h.feed(outcome(str(uuid.uuid4()), "s", Outcome.ACCEPTED, 10_000))
    late = outcome(str(uuid.uuid4()), "s", Outcome.REJECTED, 5_000)  # behind its own topic
    h.feed(late)
    [(topic, letter)] = h.letters
    assert topic == "dlq.late"
    assert letter.header("flywheel.cause") == "late"
    assert letter.header("flywheel.stage") == "joiner"
    assert "is 5000 ms behind the watermark" in (letter.header("flywheel.error") or "")
    assert "of telemetry.outcomes partition 0" in (letter.header("flywheel.error") or "")
    assert letter.value  # outcomes carry no code text: the bytes are kept for replay
    assert h.stats.late == 1
    assert late.suggestion_id not in h.state  # a late event leaves no state behind


def test_joiner_withholds_late_offer_bodies_in_privacy_mode() -> None:
    h = Harness()
    h.feed(offered("s", event_time=at(10_000)))
    h.feed(offered("s", event_time=at(0), privacy_mode=True, suggestion_text=None))
    [(_, letter)] = h.letters
    assert letter.value == b""
    assert letter.header("flywheel.body-withheld") == "privacy"


def test_joiner_dead_letters_undecodable_records_and_goes_on() -> None:
    h = Harness()
    h.feed(b"\x00\x00", topic="telemetry.outcomes")
    [(topic, letter)] = h.letters
    assert (topic, letter.header("flywheel.cause")) == ("dlq.joiner", "truncated")
    h.feed(offered("s", event_time=at(0)), tick("s", 5000))
    assert len(h.emitted) == 1


def test_joiner_watermarks_are_per_partition() -> None:
    h = Harness()
    h.feed(offered("s1", event_time=at(0)), partition=0)
    h.feed(tick("s2", 60_000), partition=1)
    assert h.emitted == []
    h.feed(tick("s1", 60_000), partition=0)
    assert len(h.emitted) == 1


def rollout(rollout_id: str, score: float, group: str = "g") -> RolloutResult:
    return RolloutResult(
        producer=PRODUCER, event_time=T0, rollout_id=rollout_id, task_id="t", group_id=group,
        model_name="agent", model_version=1, prompt_tokens=1, completion_tokens=1, tool_calls=0,
        tests_passed=0, tests_total=0, reward_components={"r": score}, behaviour_logprobs=(),
        duration_ms=1,
    )  # fmt: skip


def test_rollout_groups_emit_when_complete_and_stragglers_are_late() -> None:
    h = Harness()
    first = rollout("a", 0.0)
    h.feed(first, first, rollout("b", 1.0))  # a duplicate delivery counts once
    assert h.emitted == []
    h.feed(rollout("c", 2.0))
    advantages = {r["source_id"]: r["advantage"] for _, r in h.emitted}
    assert advantages["a"] < advantages["b"] < advantages["c"]
    assert {key for key, _ in h.emitted} == {b"g"}
    h.feed(rollout("d", 3.0))
    [(topic, letter)] = h.letters
    assert topic == "dlq.late" and "already complete" in (letter.header("flywheel.error") or "")
    assert h.stats.groups == 1


def test_rollout_groups_do_not_depend_on_where_batches_are_cut() -> None:
    """Groups complete by size and by timeout, a duplicate and a straggler: one record at a
    time, one batch, and two batches with a restarted grouper between (indexes rebuilt from
    the table) emit the same Rewards and dead letters."""

    def trial(rollout_id: str, group: str, seconds: float) -> RolloutResult:
        at_s = T0 + timedelta(seconds=seconds)
        return dataclasses.replace(rollout(rollout_id, seconds, group), event_time=at_s)

    d = trial("d", "g2", 10)
    trials = [
        trial("a", "g1", 0), trial("b", "g1", 1),  # g1 times out (120 s) at f
        trial("c", "g2", 10), d, d, trial("e", "g2", 11),  # g2 complete by size at e
        trial("f", "g3", 130), trial("g", "g1", 131),  # g: a straggler of the emitted g1
        trial("h", "g3", 132), trial("i", "g3", 133),
    ]  # fmt: skip

    def run(cuts: list[int]) -> tuple[dict[str, float], list[str]]:
        h = Harness()
        records = [h.record(t) for t in trials]
        for lo, hi in itertools.pairwise([0, *cuts, len(records)]):
            grouper = RolloutGrouper(
                h.grouper._state, h.codec, GroupPolicy(expected_size=3), h.outputs, h.stats
            )  # a restarted worker over the same table
            asyncio.run(grouper.on_batch(records[lo:hi]))
        advantages = {str(r["reward_id"]): float(r["advantage"]) for _, r in h.emitted}
        return advantages, [topic for topic, _ in h.letters]

    one_by_one = run(list(range(1, len(trials))))
    assert len(one_by_one[0]) == 8 and one_by_one[1] == ["dlq.late"]
    for cuts in ([], [5], [7], [3, 8]):
        assert run(cuts) == one_by_one, cuts


def test_rollouts_the_consumer_skipped_are_read_again_before_later_ones() -> None:
    """As for the joiner: a rollout after a skipped offset waits until the skipped one is read
    again, so the group is emitted with all of its trials, once."""
    h = Harness()
    r_a, r_b, r_c = (h.record(rollout(r, float(i))) for i, r in enumerate("abc"))
    for rec in (r_a, r_c):  # r_b never arrives
        asyncio.run(h.grouper.on_event(rec))
    assert h.emitted == [] and h.stats.refetches == 1
    assert h.grouper.take_seeks() == {("rollouts.results", 0): r_b.offset}
    assert h.grouper.take_seeks() == {}
    for rec in (r_b, r_c):  # read again from the skipped offset
        asyncio.run(h.grouper.on_event(rec))
    assert sorted(r["source_id"] for _, r in h.emitted) == ["a", "b", "c"]
    assert h.stats.groups == 1 and h.stats.holes == 0


def test_a_clock_pushed_ahead_by_other_producers_does_not_time_out_new_groups() -> None:
    h = Harness()
    ahead = dataclasses.replace(rollout("x", 1.0, group="sim"), event_time=T0 + timedelta(hours=2))
    h.feed(ahead)  # e.g. a simulator whose clock runs faster than the wall clock
    h.feed(rollout("a", 0.0), rollout("b", 1.0))  # real trials, "two hours late" by that clock
    assert h.emitted == [] and h.letters == []  # no singleton groups, nothing late
    h.feed(rollout("c", 2.0))
    assert sorted(r["source_id"] for _, r in h.emitted) == ["a", "b", "c"]


def test_joiner_rebuilds_its_deadline_index_from_the_table_after_a_restart() -> None:
    h = Harness()
    h.feed(offered("s", event_time=at(0)), tick("s", 100))
    restarted = joiner_over(h.state, h)
    # The suggestions input has not moved since the restart: idle after idle_s (0 here).
    asyncio.run(restarted.on_event(h.record(tick("s", 5000))))
    assert len(h.emitted) == 1


class CountingState(DictState):
    """DictState that counts changelog writes per key."""

    def __init__(self) -> None:
        super().__init__({})
        self.writes: dict[str, int] = {}

    def put(self, partition: int, key: str, value: Any) -> None:
        self.writes[key] = self.writes.get(key, 0) + 1
        super().put(partition, key, value)


def test_joiner_batch_writes_each_changed_key_once() -> None:
    h = Harness()
    state = CountingState()
    joiner = joiner_over(state, h)
    offer = offered("s", event_time=at(0))
    events = [offer, outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100), tick("s", 200)]
    asyncio.run(joiner.on_batch([h.record(e) for e in events]))
    assert state.writes[offer.suggestion_id] == 1
    assert state.writes[watermark_key("telemetry.edits", 0)] == 1
    assert all(n == 1 for n in state.writes.values())
    # Same result as one event at a time: the deadline passes later, one reward.
    asyncio.run(joiner.on_batch([h.record(tick("s", 5000))]))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}


def test_joiner_reads_state_of_the_previous_layout() -> None:
    h = Harness()
    offer = offered("s", event_time=at(0))
    legacy = PendingSuggestion(offered=offer)
    h.state[offer.suggestion_id] = json.dumps({"p": 0, "k": "s", "s": legacy.to_json()})
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100))
    assert '"s":' in h.state[offer.suggestion_id]  # rewritten in its own layout
    h.feed(tick("s", 5000))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}


def test_a_topic_running_ahead_does_not_make_another_late() -> None:
    """A backlog fetch brings edits far ahead: outcomes behind them are on time, and the
    suggestion waits for its outcome instead of being attributed as ignored."""
    h = Harness()
    h.joiner = joiner_over(h.state, h, idle_s=1e9)  # no input ever idle here
    offer = offered("s", event_time=at(0))
    h.feed(offer, tick("s", 60_000))  # edits are a minute ahead
    assert h.emitted == [] and h.letters == []
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 500))  # not late
    assert h.letters == [] and h.emitted == []  # suggestions' own watermark holds it back
    h.feed(offered("s", event_time=at(5_000)), outcome(str(uuid.uuid4()), "s",
           Outcome.REJECTED, 5_000))  # fmt: skip
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}


def test_an_idle_input_stops_holding_back_attribution() -> None:
    h = Harness()
    clock = iter(range(0, 10_000, 5))
    h.joiner = RewardJoiner(
        h.state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        idle_s=20.0, monotonic=lambda: float(next(clock)),
    )  # fmt: skip
    offer = offered("s", event_time=at(0))
    h.feed(offer)  # suggestions input at 0, then silent
    h.feed(tick("s", 4000))
    assert h.emitted == []  # the suggestions input was active a moment ago
    for ms in range(4100, 4600, 100):
        h.feed(tick("s", ms))  # the clock moves 5 s per read: suggestions go idle
    assert len(h.emitted) == 1


def test_a_quiet_input_with_records_left_to_read_is_not_idle() -> None:
    """The crash bench's one wrong Reward: after a restart the worker worked through a backlog of
    offers for longer than idle_s before the consumer reached that partition's outcomes; the
    outcomes input looked idle (no progress on the wall clock), so an accepted suggestion was
    attributed as ignored. An input is idle only once the consumer has nothing more of it."""
    h = Harness()
    clock = iter(range(0, 10_000, 5))
    backlog = {"telemetry.outcomes": 1}  # one outcome on the broker, not applied yet
    h.joiner = RewardJoiner(
        h.state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        idle_s=2.0, monotonic=lambda: float(next(clock)),
        caught_up=lambda topic, _partition, _applied: backlog.get(topic, 0) == 0,
    )  # fmt: skip
    offer = offered("s", event_time=at(0))
    h.feed(offer, outcome(str(uuid.uuid4()), "s", Outcome.REJECTED, 0))  # both inputs have moved
    h.feed(*(offered("s", event_time=at(ms)) for ms in range(1000, 9000, 500)))  # 5 s per read
    assert h.emitted == []  # the outcomes input is quiet but has a record left: it holds back
    backlog.clear()
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100))
    h.feed(offered("s", event_time=at(9000)))
    assert h.rewards()[reward_id(offer.suggestion_id, "tab@1")] == 0.75  # accepted, not ignored


def test_the_last_record_of_a_backlog_attributes_once_every_input_is_caught_up() -> None:
    """The record being applied counts as read: when it is the last one on the broker, its own
    input is caught up too, so the inputs go idle and nothing waits for a record to come."""
    h = Harness()
    high = {"telemetry.suggestions": 2, "telemetry.outcomes": 2}  # what the broker holds
    h.joiner = RewardJoiner(
        h.state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        idle_s=0.0, monotonic=itertools.count().__next__,
        caught_up=lambda t, _p, applied: (-1 if applied is None else applied) + 1 >= high[t],
    )  # fmt: skip
    first, second = offered("s", event_time=at(0)), offered("s", event_time=at(100))
    h.feed(first, outcome(first.suggestion_id, "s", Outcome.ACCEPTED, 50))
    h.feed(outcome(str(uuid.uuid4()), "s", Outcome.REJECTED, 60_000))  # a tick on outcomes
    assert h.emitted == []  # an offer is still on the broker: the offers input holds back
    h.feed(second)
    assert h.rewards() == {
        reward_id(first.suggestion_id, "tab@1"): 0.75,
        reward_id(second.suggestion_id, "tab@1"): -0.25,
    }


def test_a_tick_attributes_what_went_idle_after_the_partitions_last_record() -> None:
    """The joiner crash test's 320 missing Rewards: after a restart the worker re-read only the
    ticks that move the outcomes watermark, within idle_s of its start, so the offers input
    still held attribution back; no record of that partition came again. The tick attributes
    once the offers input has gone idle, and only then."""
    h = Harness()
    now = [0.0]
    h.joiner = joiner_on_clock(h, now)
    offer = offered("s", event_time=at(0))
    h.feed(offer, outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 50))
    h.feed(tick("s", 60_000))  # the edits input moves far ahead; the offers input is not idle
    asyncio.run(h.joiner.on_tick([0, 1]))
    assert h.emitted == []
    now[0] = 2.5  # the offers and outcomes inputs have been quiet for longer than idle_s
    asyncio.run(h.joiner.on_tick([0, 1]))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}
    written = dict(h.state)
    asyncio.run(h.joiner.on_tick([0, 1]))
    assert len(h.emitted) == 1 and h.state == written  # nothing due: nothing emitted or written


def test_a_taken_over_partitions_inputs_are_not_idle_at_once() -> None:
    """After a rebalance the idle clock restarts: a worker that has run for a while must not
    count the other inputs of a partition it just took over as idle before it read them."""
    h = Harness()
    now = [0.0]
    h.joiner = joiner_on_clock(h, now)
    offer = offered("s", event_time=at(0))
    h.feed(offer, outcome(str(uuid.uuid4()), "s", Outcome.REJECTED, 0))
    now[0] = 600.0  # the worker ran for ten minutes; then partition 0 came back in a rebalance
    h.joiner.forget_deadlines()
    h.feed(offered("s", event_time=at(8000)))  # the outcomes input has not been read since
    assert h.emitted == []
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100))
    h.feed(outcome(str(uuid.uuid4()), "s", Outcome.REJECTED, 8000))
    assert h.rewards()[reward_id(offer.suggestion_id, "tab@1")] == 0.75


def test_state_restored_behind_the_joiner_is_read_not_its_stale_decoded_copy() -> None:
    """The crash bench's wrong Reward: a rebalance hands partition 1 over (the joiner forgets
    its indexes at faust's signal, before recovery runs); a batch of partition 0 buffered before
    the rebalance is processed while partition 1's changelog is still being restored, and its
    index rebuild decoded partition 1's half-restored suggestion. Recovery then wrote the whole
    document (the outcome another worker had applied); attributing from the decoded copy scored
    an accepted suggestion as ignored."""
    h = Harness()
    offer = offered("s1", event_time=at(0))
    h.feed(offer, partition=1)
    h.feed(offered("s0", event_time=at(0)), partition=0)
    other = dict(h.state)  # another worker owns partition 1 for a while and applies its outcome
    owner = Harness()
    owner.codec, owner.offsets = h.codec, dict(h.offsets)  # one registry: one set of schema ids
    owner.joiner = joiner_over(other, owner, idle_s=1e9)
    owner.feed(outcome(offer.suggestion_id, "s1", Outcome.ACCEPTED, 100), partition=1)
    h.offsets = owner.offsets
    h.joiner.forget_deadlines()  # partition 1 comes back: faust's signal, then its recovery
    h.feed(tick("s0", 100), partition=0)  # a buffered batch of partition 0, mid-recovery
    h.state.update(other)  # recovery restores partition 1's changelog to its end
    h.feed(tick("s1", 5000), partition=1)
    assert h.rewards()[reward_id(offer.suggestion_id, "tab@1")] == 0.75  # accepted


def test_events_resent_after_attribution_add_no_second_reward() -> None:
    """The SDK's spool re-sends events whose acks were lost (same event_ids). Before attribution
    the pending state folds each event_id once; after it, while a re-sent offer would still be
    on time (its topic lags), the suggestion's done marker catches the re-sends: no second
    Reward for the suggestion, and no wrong one."""
    h = Harness()
    offer = offered("s", event_time=at(0))
    accepted = outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100)
    h.feed(offer, accepted, accepted, offer)  # re-sent while pending: folded once
    h.feed(tick("s", 5000))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}
    h.feed(offer, accepted, tick("s", 9000))  # re-sent after attribution
    assert len(h.emitted) == 1 and h.letters == [] and h.stats.duplicates == 2


def test_an_orphan_expires_once_its_offer_would_be_late() -> None:
    h = Harness()
    h.joiner = joiner_over(h.state, h, idle_s=1e9)  # every input holds attribution back
    offer = offered("s", event_time=at(900))  # it will come too late
    orphan = offer.suggestion_id
    orphaned = outcome(orphan, "s", Outcome.ACCEPTED, 1000)
    h.feed(orphaned, tick("s", 60_000))
    assert orphan in h.state  # no offers seen on the partition: it waits, whatever the time
    h.feed(offered("s", event_time=at(2000)))  # 1000 is not behind 2000 - 1000 lateness
    assert orphan in h.state and h.stats.expired == 0
    h.feed(offered("s", event_time=at(2001)))
    assert orphan not in h.state and h.stats.expired == 1
    [(topic, letter)] = h.letters  # the orphan's outcome, dead-lettered with the reason
    headers = dict(letter.headers)
    assert topic == "dlq.late" and headers["flywheel.cause"] == b"orphan"
    assert f"no offer for suggestion {orphan}".encode() in headers["flywheel.error"]
    assert str(h.codec.decode("telemetry.outcomes", letter.value)["event_id"]) == orphaned.event_id
    h.feed(offer)  # its offer precedes its outcome, so it is late now
    assert [topic for topic, _ in h.letters] == ["dlq.late", "dlq.late"]
    assert reward_id(orphan, "tab@1") not in h.rewards()


def test_an_orphan_whose_offer_arrives_is_attributed_not_expired() -> None:
    h = Harness()
    offer = offered("s", event_time=at(0))
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100))
    h.feed(offer, tick("s", 5000))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}
    assert h.stats.expired == 0


def test_orphans_are_found_again_after_a_restart() -> None:
    h = Harness()
    offer = offered("s", event_time=at(900))
    h.feed(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 1000))
    h.joiner = joiner_over(h.state, h)  # a new worker: indexes rebuilt from the table
    h.feed(offered("s", event_time=at(2001)))
    assert offer.suggestion_id not in h.state and h.stats.expired == 1


def test_an_emitted_groups_entry_is_freed_after_the_horizon() -> None:
    h = Harness()
    h.grouper = RolloutGrouper(
        {}, h.codec, GroupPolicy(expected_size=2, timeout_ms=1000), h.outputs, h.stats,
        done_horizon_ms=5000,
    )  # fmt: skip
    h.feed(rollout("a", 0.0), rollout("b", 1.0))  # group g complete, emitted at T0
    state = h.grouper._state  # the table
    assert json.loads(state.get("g"))["done"] is True
    later = dataclasses.replace(rollout("x", 1.0, group="h"), event_time=T0 + timedelta(seconds=4))
    h.feed(later)
    assert state.get("g") is not None  # within the horizon: a straggler is still caught
    h.feed(dataclasses.replace(later, rollout_id="y", event_time=T0 + timedelta(seconds=5)))
    assert state.get("g") is None and h.stats.expired_groups == 1


def test_a_batch_is_attributed_after_all_its_records() -> None:
    """Attribution runs once per partition at the end of a batch: an outcome later in the same
    batch than the record that moved the watermark past its deadline still counts."""
    h = Harness()
    offer = offered("s", event_time=at(0))
    records = [
        h.record(offer),
        h.record(tick("s", 60_000)),  # the edits' watermark passes the deadline here
        h.record(outcome(offer.suggestion_id, "s", Outcome.ACCEPTED, 100)),
    ]
    asyncio.run(h.joiner.on_batch(records))
    assert h.rewards() == {reward_id(offer.suggestion_id, "tab@1"): 0.75}


def test_records_the_consumer_skipped_are_read_again_before_later_ones() -> None:
    """The crash bench's missing Reward: after a rebalance faust handed the agent offsets n-1
    and n+1 but never n, and committed past it. The offset markers say n is missing: later
    records wait, the joiner asks for a seek back to n, and applies n first."""
    h = Harness()
    first, lost, after = (offered("s", event_time=at(ms)) for ms in (0, 10, 20))
    r_first, r_lost, r_after = h.record(first), h.record(lost), h.record(after)
    asyncio.run(h.joiner.on_batch([r_first, r_after]))  # n never arrives
    assert lost.suggestion_id not in h.state and after.suggestion_id not in h.state
    assert h.joiner.take_seeks() == {("telemetry.suggestions", 0): r_lost.offset}
    assert h.joiner.take_seeks() == {}
    asyncio.run(h.joiner.on_batch([r_lost, r_after]))  # read again from n
    assert lost.suggestion_id in h.state and after.suggestion_id in h.state
    assert h.stats.refetches == 1 and h.stats.holes == 0


def test_offsets_that_hold_no_record_are_accepted_after_a_while() -> None:
    """A transactionally written input has a commit marker after each transaction: an offset
    no record will ever come from. After `hole_accept_s` the joiner takes the hole as real."""
    h = Harness()
    now = [0.0]
    h.joiner = RewardJoiner(
        h.state, h.codec, reward_functions(["tab@1"]), WINDOWS, h.outputs, h.stats,
        monotonic=lambda: now[0], hole_accept_s=30.0,
    )  # fmt: skip
    one, two = offered("s", event_time=at(0)), offered("s", event_time=at(10))
    r_one = h.record(one)
    h.offsets["telemetry.suggestions", 0] += 1  # offset r_one + 1: a transaction marker
    r_two = h.record(two)
    asyncio.run(h.joiner.on_batch([r_one, r_two]))
    assert two.suggestion_id not in h.state and h.joiner.take_seeks()
    now[0] = 10.0
    asyncio.run(h.joiner.on_batch([r_two]))  # re-read: the hole is still there
    assert two.suggestion_id not in h.state and h.joiner.take_seeks()  # asks again
    now[0] = 31.0
    asyncio.run(h.joiner.on_batch([r_two]))
    assert two.suggestion_id in h.state and h.stats.holes == 1
