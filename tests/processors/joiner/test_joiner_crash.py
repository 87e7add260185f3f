"""Exactly-once under SIGKILL at the worst moments: right before and right after a transaction
commit, while a burst of Rewards and state writes is in flight (`joiner_crash_hook.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flywheel.settings import Settings
from streams.admin import TopicAdmin
from tests.processors.joiner.test_joiner_worker import (
    Topics,
    Worker,
    assert_rewards_once,
    produce,
    read_after_restart,
    sessions,
    tick,
    wait_started,
)

pytestmark = pytest.mark.integration

HOOK = Path(__file__).with_name("joiner_crash_hook.py")
SESSIONS = 300  # 4 suggestions each: 1,200 Rewards, emitted in one burst per partition


@pytest.mark.parametrize("mode", ["after", "before", "term"])
def test_joiner_killed_at_a_commit_loses_and_duplicates_nothing(
    stack: Settings, unique: str, tmp_path: Path, mode: str
) -> None:
    topics = Topics(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(topics.specs())
    worker = Worker(stack, topics, f"{unique}.joiner", tmp_path / "worker.log")
    plain = list(worker.cmd)
    # The first start dies at the first commit once 200 Rewards are out; restarts run plain.
    options = plain[plain.index("process") + 1 :]  # after `python -m flywheel process`
    worker.cmd = [sys.executable, str(HOOK), mode, "200", *options]
    events, expected = sessions(SESSIONS)
    try:
        worker.start()
        wait_started(worker)
        produce(stack, topics, events)
        # Ticks on many sessions reach every partition; their outcomes have no offer.
        produce(stack, topics, [tick(f"s-{i}") for i in range(40)])
        assert worker.proc is not None
        code = worker.proc.wait(90)
        log = worker.log.read_text(errors="replace")
        assert "crash hook: SIG" in log, log[-3000:]
        print(log[-600:])
        if mode == "term":
            assert code == 0, log[-3000:]  # stopped cleanly: flushed, committed
        worker.cmd = plain
        worker.start()
        got = read_after_restart(stack, topics.rewards, len(expected))
    finally:
        worker.stop()
    assert_rewards_once(got, expected)
