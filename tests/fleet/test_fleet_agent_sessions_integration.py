"""Served tool sessions become training rows, on the real stack: the stock `openai` client runs
multi-turn sessions against the agent app (real engine, a tiny real model whose tool calls a
test scripts); every turn's AgentCompletion goes to Kafka, the user's feedback on a session's
last turn joins it into a Reward (the real joiner), and the learner's token window reads each
reacted session as one row: both turns targets with their served log-probs, the tool observation
between them context. A session whose model wrote a malformed call is answered as text and
trains like any served completion; nothing stops the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import OpenAI
from starlette.testclient import TestClient

from environments.episode_runner import tokenize_segments
from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from learner.recipes.agent_rl.windows import TokenWindowConfig, build_agent_window
from policies.agent_chat import segments
from schemas.enums import AgentReaction
from schemas.events import AgentCompletion, AgentFeedback, Reward
from streams.admin import TopicAdmin
from streams.client import TelemetryClient
from streams.privacy import Pseudonymizer
from streams.topics import COMPLETIONS_TOPIC, REWARDS_TOPIC
from tests.fleet.agent_tools_fixture import MODEL, TOOLS, Replica, script, tiny_chat_lm
from tests.learner.recipes.agent_rl.agent_lake import window_rows, write_lake_file
from tests.processors.joiner.test_joiner_worker import Topics, Worker, read_decoded

pytestmark = pytest.mark.integration

READ = '<tool_call>{"name":"read_file","arguments":{"path":"a.py"}}</tool_call>'
SUBMIT = '<tool_call>{"name":"submit","arguments":{}}</tool_call>'
BROKEN = '<tool_call>{"name":"read_file","arguments":{"path":</tool_call>'
BIAS = 25.0  # sampled at temperature 1, the scripted tokens win all but ~1e-9 of the time
SUFFIX = 12  # prompt tokens a script is keyed by (transformers' sequence_bias: shorter than it)


def _system() -> dict[str, str]:
    return {"role": "system", "content": "You fix bugs."}


def _ids(policy: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt ids the app builds for ``messages`` (the chat template's segments)."""
    eos = policy.tokenizer.eos_token
    ids, _ = tokenize_segments(policy.tokenizer, segments(messages, eos, TOOLS, True))
    return ids


def test_served_sessions_reach_the_learner_as_masked_episodes(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    topics = Topics(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(topics.specs())
    codec = make_codec(stack)
    telemetry = TelemetryClient(stack.kafka_client_config(), codec, tmp_path / "spool",
                                Pseudonymizer(b"k" * 32), topics=topics.by_platform)  # fmt: skip
    policy = tiny_chat_lm()
    task = [_system(), {"role": "user", "content": "Fix the bug in a.py"}]
    broken_task = [_system(), {"role": "user", "content": "Fix the bug in b.py"}]
    read_ids = script(policy, _ids(policy, task)[-SUFFIX:], READ, BIAS)
    script(policy, _ids(policy, broken_task)[-SUFFIX:], BROKEN, BIAS)
    engine = Engine()
    engine.start()
    app = create_agent_app(Replica(policy), engine, telemetry.agent_completion, keys=None,
                           producer="serve/t")  # fmt: skip
    last: dict[str, str] = {}
    reactions = {"s-pass": AgentReaction.TESTS_PASSED, "s-fail": AgentReaction.REVERTED,
                 "s-broken": AgentReaction.REVERTED}  # fmt: skip

    def react(session: str) -> None:
        """The user's reaction to the session's last turn, right away (the test joiner's
        feedback window is 2 s)."""
        telemetry.agent_feedback(AgentFeedback(
            producer="sim/test", completion_id=last[session], session_id=session,
            reaction=reactions[session], event_time=datetime.now(UTC),
        ))  # fmt: skip

    with TestClient(app) as http:
        client = OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http)

        def ask(messages: list[dict[str, Any]], session: str) -> Any:
            answer = client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, temperature=1.0,  # type: ignore[arg-type]
                max_tokens=120, extra_body={"session_id": session},
            )  # fmt: skip
            last[session] = answer.flywheel["completion_ids"][0]  # type: ignore[attr-defined]
            return answer.choices[0]

        for session in ("s-pass", "s-fail"):
            first = ask(list(task), session)
            assert first.finish_reason == "tool_calls", first
            call = first.message.tool_calls[0]
            turn = [
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "def f(): return 1"},
            ]
            script(policy, _ids(policy, [*task, *turn])[-SUFFIX:], SUBMIT, BIAS)
            second = ask([*task, *turn], session)
            assert second.message.tool_calls[0].function.name == "submit"
            react(session)
        malformed = ask(list(broken_task), "s-broken")
        react("s-broken")
        assert (malformed.finish_reason, malformed.message.content) == ("stop", BROKEN)
    engine.close()

    now = datetime.now(UTC)
    for session in reactions:  # move each session's partition watermark past the deadlines
        telemetry.agent_feedback(AgentFeedback(
            producer="sim/test", completion_id=f"tick-{session}:0", session_id=session,
            reaction=AgentReaction.REVERTED, event_time=now + timedelta(seconds=10),
        ))  # fmt: skip
    telemetry.flush()
    telemetry.close()
    joiner = Worker(stack, topics, f"{unique}.joiner", tmp_path / "joiner.log")
    joiner.start()
    try:
        # 5 completions served
        rewards = read_decoded(stack, codec, topics.rewards, REWARDS_TOPIC, Reward, 5, 120)
    finally:
        joiner.stop()
    assert len(rewards) == 5, joiner.log.read_text()[-3000:]
    completions = read_decoded(stack, codec, topics.by_platform[COMPLETIONS_TOPIC],
                               COMPLETIONS_TOPIC, AgentCompletion, 5, 30)  # fmt: skip
    by_id = {c.completion_id: c for c in completions}
    second = by_id[last["s-pass"]]
    assert second.turn == 1 and second.tool_call_names == ("submit",)
    assert by_id[last["s-broken"]].tool_call_error

    # The sink's files, as the sink writes them; the learner's window of them.
    lake = tmp_path / "lake"
    write_lake_file(lake, COMPLETIONS_TOPIC, completions, now)
    write_lake_file(lake, REWARDS_TOPIC, rewards, now)
    config = TokenWindowConfig(seq_len=256, rows_per_sample=4, served_weight=1.0)
    record = build_agent_window(lake, tmp_path / "mds", "d", model_name=MODEL,
                                pad_id=policy.tokenizer.pad_token_id, config=config)  # fmt: skip
    assert record is not None
    # The two first turns nobody reacted to carry no signal; the three reacted ones train.
    assert (record.rows, record.served_rows, record.zero_advantage_rows) == (3, 3, 2)
    rows = window_rows(tmp_path / "mds" / "d" / record.name)
    prompt = len(_ids(policy, task))
    episode = len(second.prompt_token_ids or ()) + len(second.completion_token_ids or ())
    sessions = [i for i, n in enumerate(rows["lengths"]) if int(n) == episode]
    assert len(sessions) == 2  # the two sessions, each one row of both turns
    row = sessions[0]
    ids = list(second.prompt_token_ids or ()) + list(second.completion_token_ids or ())
    assert rows["input_ids"][row, :episode].tolist() == ids
    targets = rows["target"][row, :episode].tolist()
    observation = len(second.prompt_token_ids or ()) - prompt - len(read_ids)
    assert targets[:prompt] == [0] * prompt
    assert targets[prompt : prompt + len(read_ids)] == [1] * len(read_ids)  # the first turn
    assert targets[prompt + len(read_ids) : prompt + len(read_ids) + observation] == [0] * (
        observation
    )  # the tool's output and the template between the turns
    assert targets[-len(second.completion_token_ids or ()) :] == [1] * len(
        second.completion_token_ids or ()
    )
    np.testing.assert_allclose(
        rows["behaviour"][row, prompt : prompt + len(read_ids)],
        [lp for lp, m in zip(second.prompt_logprobs, second.prompt_mask, strict=True) if m],
        rtol=1e-5,
    )
