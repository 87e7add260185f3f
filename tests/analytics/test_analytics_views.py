"""The analyst views over a small hand-built lake whose every number is known."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics import Catalog
from schemas.enums import Decision, Outcome, RewardSource
from schemas.events import (
    EditObserved,
    Event,
    Reward,
    RolloutResult,
    SuggestionOutcome,
    ToolCallObserved,
)
from tests.analytics.lake_builder import write_lake
from tests.sample_events import PRODUCER, offered

DAY1 = datetime(2025, 1, 6, 10, 0, tzinfo=UTC)
DAY2 = datetime(2025, 1, 7, 23, 30, tzinfo=UTC)
S = timedelta(seconds=1)


def _outcome(o: Any, outcome: Outcome, chars: int, delay: timedelta = S) -> SuggestionOutcome:
    return SuggestionOutcome(
        producer=PRODUCER, event_time=o.event_time + delay, suggestion_id=o.suggestion_id,
        session_id=o.session_id, outcome=outcome, accepted_chars=chars, time_to_decision_ms=900,
    )  # fmt: skip


def _edit(o: Any, retained: int | None, delay: timedelta) -> EditObserved:
    return EditObserved(
        producer=PRODUCER, event_time=o.event_time + delay, session_id=o.session_id,
        suggestion_id=o.suggestion_id, chars_inserted=1, chars_deleted=1,
        accepted_chars_retained=retained, elapsed_since_acceptance_ms=int(delay / S) * 1000,
    )  # fmt: skip


def _reward(o: Any, fn: str, value: float) -> Reward:
    return Reward(
        producer=PRODUCER, event_time=o.event_time, reward_id=f"{o.suggestion_id}:{fn}",
        source=RewardSource.SUGGESTION, source_id=o.suggestion_id, session_id=o.session_id,
        model_name=o.model_name, model_version=o.model_version, decision=o.decision,
        propensity=o.propensity, language=o.language, reward=value,
        reward_components={"accepted": float(value > 0)}, reward_fn=fn, attributed_at=DAY2,
    )  # fmt: skip


def _rollout(task: str, group: str, passed: int, total: int, reward: float) -> list[Event]:
    result = RolloutResult(
        producer=PRODUCER, event_time=DAY1, rollout_id=f"{group}-{passed}", task_id=task,
        group_id=group, model_name="agent", model_version=3, prompt_tokens=10,
        completion_tokens=5, tool_calls=1, tests_passed=passed, tests_total=total,
        reward_components={"tests": passed / total}, behaviour_logprobs=(-0.5,),
        duration_ms=1000 * total,
    )  # fmt: skip
    advantage = reward - 0.5 if task == "t1" else 0.0
    return [
        result,
        Reward(
            producer=PRODUCER, event_time=DAY1, reward_id=f"r-{result.rollout_id}",
            source=RewardSource.ROLLOUT, source_id=result.rollout_id, group_id=group,
            model_name="agent", model_version=3, reward=reward, reward_components={},
            reward_fn="grpo@1", advantage=advantage, attributed_at=DAY2,
        ),
    ]  # fmt: skip


def _tool_call(rollout: str, turn: int, tool: str, status: str, ms: int) -> ToolCallObserved:
    return ToolCallObserved(
        producer=PRODUCER, event_time=DAY1, rollout_id=rollout, task_id="t1", group_id="g1",
        model_name="agent", model_version=3, turn=turn, tool=tool, status=status,
        duration_ms=ms, arguments_bytes=10, observation_bytes=100 * (turn + 1),
        truncated=turn == 2, arguments="{}",
    )  # fmt: skip


def lake_events() -> list[Event]:
    """v1: 5 requests (4 shown, 2 accepted, 1 survived); v2: 2 requests (2 shown, 1 accepted)."""
    v1 = [
        offered("s1", event_time=DAY1, model_version=1, language="python"),
        offered("s2", event_time=DAY1 + S, model_version=1, language="python"),
        offered("s3", event_time=DAY1 + 2 * S, model_version=1, language="go"),
        offered("s4", event_time=DAY2, model_version=1, language="go",
                decision=Decision.SUPPRESSED),
        offered("s5", event_time=DAY2 + S, model_version=1, language="go"),
    ]  # fmt: skip
    v2 = [
        offered("s6", event_time=DAY2, model_version=2, language="python"),
        offered("s7", event_time=DAY2 + S, model_version=2, language="python"),
    ]
    events: list[Event] = [*v1, *v2]
    events += [
        _outcome(v1[0], Outcome.ACCEPTED, 40),
        _edit(v1[0], 30, 10 * S),
        _edit(v1[0], 0, 20 * S),  # the last report wins: nothing retained, not survived
        _edit(v1[0], None, 30 * S),  # reports no retention: ignored
        _outcome(v1[1], Outcome.PARTIAL, 10),  # no edit: fully retained
        _outcome(v1[2], Outcome.REJECTED, 0),
        _outcome(v2[0], Outcome.ACCEPTED, 20),
        _edit(v2[0], 10, 5 * S),  # half retained
        _outcome(v2[1], Outcome.REJECTED, 0, S),  # the earliest outcome counts
        _outcome(v2[1], Outcome.ACCEPTED, 30, 2 * S),
    ]
    tab = [0.75, 0.75, -0.25, 0.0, -0.25]
    survival = [0.0, 0.75, -0.25, 0.0, -0.25]
    events += [_reward(o, "tab@1", r) for o, r in zip(v1, tab, strict=True)]
    events += [_reward(o, "survival@1", r) for o, r in zip(v1, survival, strict=True)]
    events += _rollout("t1", "g1", 3, 4, 0.0) + _rollout("t1", "g1", 4, 4, 1.0)
    events += _rollout("t2", "g2", 0, 2, 0.0)
    events += [
        _tool_call("g1-3", 0, "run_tests", "ok", 40),
        _tool_call("g1-3", 1, "read_file", "ok", 2),
        _tool_call("g1-3", 2, "run_tests", "timeout", 1000),
        _tool_call("g1-4", 0, "", "malformed", 0),
        _tool_call("g1-4", 1, "run_tests", "ok", 60),
    ]  # fmt: skip
    return events


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    lake = tmp_path_factory.mktemp("lake")
    write_lake(lake, lake_events(), partitions=2, rows_per_file=3)
    connection = Catalog(lake).connect()
    yield connection
    connection.close()


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    relation = con.sql(sql)
    return [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]


def test_acceptance_by_version(con: duckdb.DuckDBPyConnection) -> None:
    v1, v2 = rows(con, "select * from acceptance_by_version")
    assert (v1["model_version"], v1["requests"], v1["shown"], v1["accepted"]) == (1, 5, 4, 2)
    assert v1["shown_per_1000"] == pytest.approx(800.0)
    assert v1["accept_rate"] == pytest.approx(0.5)
    assert v1["accepted_per_1000"] == pytest.approx(400.0)
    assert (v2["model_version"], v2["requests"], v2["shown"], v2["accepted"]) == (2, 2, 2, 1)


def test_acceptance_by_language_and_day(con: duckdb.DuckDBPyConnection) -> None:
    by_language = {
        (r["model_version"], r["language"]): (r["requests"], r["shown"], r["accepted"])
        for r in rows(con, "select * from acceptance_by_language")
    }
    assert by_language == {(1, "go"): (3, 2, 0), (1, "python"): (2, 2, 2), (2, "python"): (2, 2, 1)}
    by_day = {
        (r["day"], r["model_version"]): (r["requests"], r["shown"], r["accepted"], r["accept_rate"])
        for r in rows(con, "select * from acceptance_by_day")
    }
    assert by_day == {
        (date(2025, 1, 6), 1): (3, 3, 2, pytest.approx(2 / 3)),
        (date(2025, 1, 7), 1): (2, 1, 0, 0.0),
        (date(2025, 1, 7), 2): (2, 2, 1, 0.5),
    }


def test_funnel_counts_survival_from_the_last_reported_retention(
    con: duckdb.DuckDBPyConnection,
) -> None:
    v1, v2 = rows(con, "select * from suggestion_funnel")
    assert [v1[k] for k in ("offered", "shown", "accepted", "survived")] == [5, 4, 2, 1]
    assert v1["survival_rate"] == pytest.approx(0.5)
    assert v1["mean_retained_fraction"] == pytest.approx(0.5)  # (0 + 1) / 2
    assert [v2[k] for k in ("offered", "shown", "accepted", "survived")] == [2, 2, 1, 1]
    assert v2["mean_retained_fraction"] == pytest.approx(0.5)


def test_suggestion_facts_has_one_row_per_request(con: duckdb.DuckDBPyConnection) -> None:
    (count, distinct), = con.sql(
        "select count(*), count(distinct suggestion_id) from suggestion_facts"
    ).fetchall()  # fmt: skip
    assert count == distinct == 7


def test_reward_views(con: duckdb.DuckDBPyConnection) -> None:
    by_version = {
        (r["source"], r["reward_fn"], r["model_version"]): r
        for r in rows(con, "select * from reward_by_version")
    }
    tab = by_version["SUGGESTION", "tab@1", 1]
    assert tab["rewards"] == 5
    assert tab["reward_per_request"] == pytest.approx(0.2)
    assert tab["shown_per_1000"] == pytest.approx(800.0)
    assert by_version["SUGGESTION", "survival@1", 1]["reward_per_request"] == pytest.approx(0.05)
    rollout = by_version["ROLLOUT", "grpo@1", 3]
    assert rollout["rewards"] == 3
    assert rollout["shown_per_1000"] is None
    assert rollout["mean_advantage"] == pytest.approx(0.0)
    by_fn = {r["reward_fn"]: r for r in rows(con, "select * from reward_by_fn")}
    assert by_fn["tab@1"]["reward_sum"] == pytest.approx(1.0)
    assert by_fn["grpo@1"]["reward_per_request"] == pytest.approx(1 / 3)


def test_rollout_pass_rates(con: duckdb.DuckDBPyConnection) -> None:
    t1, t2 = rows(con, "select * from rollout_pass_rates")
    assert (t1["task_id"], t1["rollouts"], t1["groups"]) == ("t1", 2, 1)
    assert (t1["tests_passed"], t1["tests_total"]) == (7, 8)
    assert t1["pass_rate"] == pytest.approx(0.875)
    assert t1["solved_rate"] == pytest.approx(0.5)
    assert (t2["pass_rate"], t2["solved_rate"]) == (0.0, 0.0)
    (v3,) = rows(con, "select * from rollout_pass_rates_by_version")
    assert (v3["tasks"], v3["rollouts"], v3["tests_passed"], v3["tests_total"]) == (2, 3, 7, 10)
    assert v3["pass_rate"] == pytest.approx(0.7)


def test_tool_calls_by_version(con: duckdb.DuckDBPyConnection) -> None:
    by_tool = {r["tool"]: r for r in rows(con, "select * from tool_calls_by_version")}
    assert set(by_tool) == {"", "read_file", "run_tests"}
    tests = by_tool["run_tests"]
    assert (tests["calls"], tests["rollouts"], tests["model_version"]) == (3, 2, 3)
    assert tests["ok_rate"] == pytest.approx(2 / 3)
    assert tests["truncated_rate"] == pytest.approx(1 / 3)
    assert tests["mean_duration_ms"] == pytest.approx(1100 / 3)
    assert by_tool[""]["ok_rate"] == 0.0


def test_topic_views_carry_hive_and_kafka_columns(con: duckdb.DuckDBPyConnection) -> None:
    types = {r[0]: r[1] for r in con.execute("describe telemetry_suggestions").fetchall()}
    assert types["dt"] == "DATE"
    assert types["hour"] == "INTEGER"
    assert types["event_time"] == "TIMESTAMP WITH TIME ZONE"
    assert types["_offset"] == "BIGINT"
    coordinates = "select count(*), count(distinct (_partition, _offset)) from telemetry_outcomes"
    assert con.execute(coordinates).fetchall() == [(6, 6)]


def test_a_platform_topic_without_files_is_an_empty_typed_view(
    con: duckdb.DuckDBPyConnection,
) -> None:
    assert con.execute("select count(*) from models_versions").fetchall() == [(0,)]
    columns = [c[0] for c in con.sql("describe models_acks").fetchall()]
    assert columns[:2] == ["event_id", "event_time"]
    assert columns[-2:] == ["dt", "hour"]


def test_analyst_views_are_empty_not_failing_without_their_topics(tmp_path: Path) -> None:
    write_lake(tmp_path, [offered("s1", event_time=DAY1)])  # suggestions only
    with Catalog(tmp_path).connect() as con:
        assert con.execute("select count(*) from rollout_pass_rates").fetchall() == [(0,)]
        assert con.execute("select count(*) from reward_by_fn").fetchall() == [(0,)]
        assert con.sql("select accepted from acceptance_by_version").fetchall() == [(0,)]


def test_a_resent_event_is_one_row_and_a_reemitted_reward_one_reward(tmp_path: Path) -> None:
    """The SDK's spool re-sends an event whose ack was lost (same event_id, a later offset); an
    at-least-once joiner re-emits a Reward (same reward_id, fresh event_id). Each counts once."""
    offer = offered("s1", event_time=DAY1)
    outcome = _outcome(offer, Outcome.ACCEPTED, 10)
    reward = _reward(offer, "tab@1", 0.75)
    again = dataclasses.replace(reward, event_id=str(uuid.uuid4()), reward=-0.25)
    write_lake(tmp_path, [offer, offer, outcome, outcome, reward, again], partitions=1)
    with Catalog(tmp_path).connect() as con:
        assert con.execute("select count(*) from telemetry_suggestions").fetchall() == [(1,)]
        assert con.execute("select count(*) from telemetry_outcomes").fetchall() == [(1,)]
        assert con.execute("select reward from rewards").fetchall() == [(0.75,)]  # the first
        assert con.sql("select shown, accepted from acceptance_by_version").fetchall() == [(1, 1)]
