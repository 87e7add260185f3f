"""Two joiner workers in one group: a worker that joins takes over partitions whose state only
their changelog holds (it never fetched them), and the Rewards are the single worker's."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from flywheel.settings import Settings
from streams.admin import TopicAdmin
from tests.processors.joiner.test_joiner_crash import HOOK
from tests.processors.joiner.test_joiner_worker import (
    Topics,
    Worker,
    assert_rewards_once,
    produce,
    read,
    read_after_restart,
    sessions,
    tick,
    wait_started,
)

pytestmark = pytest.mark.integration

SESSIONS = 40  # 160 suggestions over the 4 partitions
PROCESSED = re.compile(r"process: ([\d,]+) events")


def processed(worker: Worker) -> int:
    """Events the worker's latest status line counts."""
    counts = PROCESSED.findall(worker.log.read_text(errors="replace"))
    return int(counts[-1].replace(",", "")) if counts else 0


def wait_processed(worker: Worker, count: int, timeout_s: float = 60) -> None:
    """Until the worker's status line counts `count` events."""
    deadline = time.monotonic() + timeout_s
    while processed(worker) < count and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processed(worker) >= count, worker.log.read_text(errors="replace")[-2000:]


def wait_for_two_members(settings: Settings, group: str, timeout_s: float = 90) -> None:
    """Until the group is stable with two members that both own partitions."""
    admin = AdminClient(settings.kafka_client_config())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
        owners = [m for m in description.members if m.assignment.topic_partitions]
        if description.state == ConsumerGroupState.STABLE and len(owners) == 2:
            return
        time.sleep(0.5)
    pytest.fail(f"group {group} did not settle with two members")


def test_a_joining_worker_takes_over_partitions_with_their_state(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    topics = Topics(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(topics.specs())
    app_id = f"{unique}.joiner"
    first = Worker(stack, topics, app_id, tmp_path / "first.log")
    second = Worker(stack, topics, app_id, tmp_path / "second.log")
    events, expected = sessions(SESSIONS)
    try:
        first.start()
        wait_started(first)
        produce(stack, topics, events)
        wait_processed(first, len(events))
        time.sleep(4)  # faust commits every 2.8 s: the state is in committed transactions
        assert read(stack, topics.rewards, 1, timeout_s=2) == []  # nothing is due yet

        second.start()
        wait_for_two_members(stack, app_id)
        # Due only now: each partition's owner attributes its suggestions from restored state.
        produce(stack, topics, [tick(f"s-{i}") for i in range(SESSIONS)])
        got = read_after_restart(stack, topics.rewards, len(expected))
    finally:
        codes = (second.stop(), first.stop())
        print(first.log.read_text(errors="replace")[-1500:])
        print(second.log.read_text(errors="replace")[-1500:])
    assert processed(second) > 0, "the second worker took no partition over"
    assert_rewards_once(got, expected)
    assert codes == (0, 0)


def test_a_transaction_open_across_a_rebalance_is_applied_once(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    """Rewards still in an open transaction when a worker joins: faust neither commits nor
    aborts it at the revocation, and table recovery replays the committed changelog over the
    partitions the first worker keeps, so their offset markers went back and the records after
    the committed offsets were applied again into the same transaction (Rewards committed
    twice). The first worker's commits are held from its first Reward to the rebalance."""
    topics = Topics(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(topics.specs())
    app_id = f"{unique}.joiner"
    first = Worker(stack, topics, app_id, tmp_path / "first.log")
    plain = list(first.cmd)
    options = plain[plain.index("process") + 1 :]  # after `python -m flywheel process`
    first.cmd = [sys.executable, str(HOOK), "hold", "1", *options]
    second = Worker(stack, topics, app_id, tmp_path / "second.log")
    events, expected = sessions(SESSIONS)
    ticks = [tick(f"s-{i}") for i in range(SESSIONS)]
    try:
        first.start()
        wait_started(first)
        produce(stack, topics, events)
        wait_processed(first, len(events))
        time.sleep(4)  # faust commits every 2.8 s: the pending state is in committed transactions
        produce(stack, topics, ticks)  # every suggestion is due: Rewards into held transactions
        wait_processed(first, len(events) + len(ticks))
        time.sleep(2)
        assert "crash hook: holding commits" in first.log.read_text(errors="replace")
        assert read(stack, topics.rewards, 1, timeout_s=2) == []  # not committed yet

        second.start()
        wait_for_two_members(stack, app_id)
        got = read_after_restart(stack, topics.rewards, len(expected))
    finally:
        codes = (second.stop(), first.stop())
        print(first.log.read_text(errors="replace")[-1500:])
        print(second.log.read_text(errors="replace")[-1500:])
    assert "crash hook: a rebalance; commits resume" in first.log.read_text(errors="replace")
    assert_rewards_once(got, expected)
    assert codes == (0, 0)
