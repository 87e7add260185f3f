"""The completion join: a served completion and its feedback become one agent_use@1 Reward,
whatever the order; late feedback goes to dlq.late, orphans expire, duplicates count once."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from processors.joiner.joiner import RewardJoiner
from processors.rewards.attribution import reward_id
from processors.rewards.errors import RewardError
from processors.rewards.joins import CompletionJoin
from processors.rewards.served import (
    FeedbackWindows,
    PendingCompletion,
    UseReward,
    add_completion_event,
    completion_rewards,
)
from schemas.enums import AgentReaction, RewardSource
from schemas.events import AgentCompletion, AgentFeedback, Event
from tests.processors.joiner.test_joiner_steps import Harness

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
WINDOWS = FeedbackWindows(feedback_ms=2000, allowed_lateness_ms=1000)
TOPIC_OF = {"AgentCompletion": "agent.completions", "AgentFeedback": "agent.feedback"}


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def completion(cid: str, ms: int, session: str = "s") -> AgentCompletion:
    return AgentCompletion(
        producer="serve/t", event_time=at(ms), completion_id=cid, request_id=cid.split(":")[0],
        session_id=session, user_id="u", api_key="ide", model_name="agent-lm", model_version=4,
        channel="canary", endpoint="completions", choice_index=0, prompt_tokens=3,
        cached_prompt_tokens=0, completion_tokens=2, prompt_token_ids=(1, 2, 3),
        completion_token_ids=(4, 2), behaviour_logprobs=(-0.5, -0.1), completion_text="x",
        temperature=1.0, top_p=1.0, max_tokens=8, finish_reason="stop", latency_ms=5,
        privacy_mode=False,
    )  # fmt: skip


def feedback(cid: str, reaction: AgentReaction, ms: int, session: str = "s") -> AgentFeedback:
    return AgentFeedback(
        producer="ide/t", event_time=at(ms), completion_id=cid, session_id=session,
        reaction=reaction,
    )  # fmt: skip


class Served(Harness):
    def __init__(self) -> None:
        super().__init__()
        self.joiner = RewardJoiner(
            self.state, self.codec, (), None, self.outputs, self.stats,  # type: ignore[arg-type]
            idle_s=0.0, monotonic=itertools.count().__next__, join=CompletionJoin(WINDOWS),
        )  # fmt: skip

    def feed(self, *events: Event | bytes, partition: int = 0, topic: str = "") -> None:
        for event in events:
            platform = topic or TOPIC_OF[event.SCHEMA_NAME]  # type: ignore[union-attr]
            rec = self.record(event, partition, platform)
            asyncio.run(self.joiner.on_event(rec))


def test_use_reward_counts_each_reaction_once_and_clips() -> None:
    fn = UseReward()
    assert fn.score([]) == (0.0, {})
    twice = [feedback("c", AgentReaction.ACCEPTED, 1), feedback("c", AgentReaction.ACCEPTED, 2)]
    assert fn.score(twice)[0] == 0.5
    good = [feedback("c", r, 1) for r in (AgentReaction.ACCEPTED, AgentReaction.EDIT_PERSISTED,
                                          AgentReaction.TESTS_PASSED)]  # fmt: skip
    assert fn.score(good) == (1.0, {"accepted": 0.5, "edit_persisted": 0.25, "tests_passed": 0.25})
    bad = [feedback("c", r, 1) for r in (AgentReaction.REVERTED,
                                         AgentReaction.DISSATISFIED_FOLLOWUP,
                                         AgentReaction.TESTS_FAILED)]  # fmt: skip
    assert fn.score(bad)[0] == -1.0


def test_folding_is_order_independent_and_only_the_window_counts() -> None:
    events = [completion("c:0", 0), feedback("c:0", AgentReaction.ACCEPTED, 500),
              feedback("c:0", AgentReaction.REVERTED, 2500)]  # fmt: skip
    forward = backward = None
    for e in events:
        forward = add_completion_event(forward, e)
    for e in reversed(events):
        backward = add_completion_event(backward, e)
    assert forward == backward
    assert isinstance(forward, PendingCompletion)
    (reward,) = completion_rewards(forward, WINDOWS, at(9000), "tests")
    assert reward.reward == 0.5  # the revert came after the 2 s window
    assert reward.source is RewardSource.COMPLETION
    assert reward.reward_id == reward_id("c:0", "agent_use@1")
    assert (reward.model_version, reward.session_id) == (4, "s")
    with pytest.raises(RewardError, match="completion"):
        add_completion_event(forward, feedback("other:0", AgentReaction.ACCEPTED, 1))


def test_the_joiner_emits_one_reward_per_completion_once_due() -> None:
    h = Served()
    h.feed(feedback("a:0", AgentReaction.ACCEPTED, 300), completion("a:0", 0))
    h.feed(completion("b:0", 100), completion("a:0", 0))  # a re-sent completion: no change
    assert h.emitted == []
    h.feed(completion("tick:0", 3500))  # watermark 3500 - 1000 passes both deadlines (~2100)
    rewards = h.rewards()
    assert rewards == {reward_id("a:0", "agent_use@1"): 0.5, reward_id("b:0", "agent_use@1"): 0.0}
    # On time against feedback, but a is attributed and a re-sent completion would be late: an
    # orphan, dead-lettered once the completions move on; a is never rewarded twice.
    h.feed(feedback("a:0", AgentReaction.REVERTED, 3400))
    h.feed(completion("tick2:0", 9000))
    assert len([r for r in h.emitted if r[1]["source_id"] == "a:0"]) == 1
    assert h.stats.expired == 1


def test_late_feedback_is_dead_lettered_and_orphans_expire() -> None:
    h = Served()
    h.feed(completion("a:0", 5000))
    h.feed(feedback("lost:0", AgentReaction.ACCEPTED, 4900))  # its completion never comes
    h.feed(feedback("a:0", AgentReaction.ACCEPTED, 5100))
    h.feed(feedback("x:0", AgentReaction.ACCEPTED, 7000))
    assert (h.stats.late, h.stats.expired) == (0, 0)
    h.feed(feedback("late:0", AgentReaction.ACCEPTED, 4000))  # 3000 ms behind 7000: late
    assert h.stats.late == 1
    h.feed(completion("tick:0", 9000))  # completions' watermark: 4900 and 7000 can't join now
    assert h.stats.expired == 2
    causes = [dict(letter.headers).get("flywheel.cause") for _, letter in h.letters]
    assert [topic for topic, _ in h.letters] == ["dlq.late"] * 3
    assert causes.count(b"orphan") == 2
    assert h.rewards()[reward_id("a:0", "agent_use@1")] == 0.5
