"""An episode's events on the real stack: its RolloutResult and ToolCallObserved events produced
(twice, as a redelivered task would), sunk into the lake, read back through the analysts'
views once each (derived event ids), with the episode's mask."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from analytics import Catalog
from fleet.episode_events import episode_result, tool_call_events
from fleet.rollout_worker import produce_results
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from processors.lake import LakeSink
from streams.admin import TopicAdmin
from streams.topic_io import EventProducer
from streams.topics import ROLLOUTS_TOPIC, TOOL_CALLS_TOPIC, TopicSpec
from tests.fleet.test_fleet_episode_events import SAMPLING, _trace

pytestmark = pytest.mark.integration


def test_tool_calls_reach_the_lake_view_once(stack: Settings, unique: str, tmp_path: Path) -> None:
    rollouts, calls_topic, dlq = f"{unique}.rollouts", f"{unique}.tool_calls", f"{unique}.dlq"
    TopicAdmin(stack.kafka_client_config()).ensure([
        TopicSpec(rollouts, "group_id", "RolloutResult", 2),
        TopicSpec(calls_topic, "group_id", "ToolCallObserved", 2),
        TopicSpec(dlq, "original key", "dead letters", 1),
    ])  # fmt: skip
    codec = make_codec(stack)
    trace = _trace()
    producer = EventProducer(stack.kafka_client_config())
    for _ in range(2):  # a redelivered task re-sends the same ids
        result = episode_result(
            trace, producer="rollouts/test", rollout_id="ro-1", group_id="g-1",
            model_name="agent-lm", model_version=4, sampling=SAMPLING,
        )  # fmt: skip
        calls = tool_call_events(trace, result)
        produce_results(producer, codec, [result], rollouts, tool_calls=calls,
                        tool_calls_topic=calls_topic)  # fmt: skip
    lake = tmp_path / "lake"
    LakeSink(
        stack.kafka_client_config(), codec, lake, [rollouts, calls_topic],
        group_id=f"{unique}.sink", dlq_topic=dlq,
        decode_as={rollouts: ROLLOUTS_TOPIC, calls_topic: TOOL_CALLS_TOPIC},
    ).run(threading.Event(), until_caught_up=True)  # fmt: skip
    # The test topics' directories under the platform names: the analysts' views read them.
    (lake / calls_topic).rename(lake / TOOL_CALLS_TOPIC)
    (lake / rollouts).rename(lake / ROLLOUTS_TOPIC)
    with Catalog(lake).connect() as con:
        raw = con.sql(
            f"select count(*) from read_parquet('{lake}/{TOOL_CALLS_TOPIC}/**/*.parquet')"
        )
        assert raw.fetchall() == [(8,)]  # both deliveries landed ...
        turns = con.sql("select turn, tool, status, arguments from agent_tool_calls order by turn")
        assert turns.fetchall() == [  # ... and the view holds each call once
            (1, "run_tests", "ok", "{}"), (2, "read_file", "ok", '{"path":"text.py"}'),
            (3, "", "malformed", None), (4, "submit", "ok", "{}"),
        ]  # fmt: skip
        by_tool = con.sql("select tool, calls, ok_rate from tool_calls_by_version order by tool")
        assert by_tool.fetchall() == [("", 1, 0.0), ("read_file", 1, 1.0), ("run_tests", 1, 1.0),
                                      ("submit", 1, 1.0)]  # fmt: skip
        episode = con.sql("select turns, tool_calls, completion_mask from rollouts_results")
        assert episode.fetchall() == [(4, 3, list(trace.mask))]
