"""Erasure: a planted user leaves no row in any lake file (telemetry, the agent's completions and
feedback, rewards, features); other rows, file names, schemas and offset ranges stay exactly as
they were. Retention drops old hour folders but never the one a
partition resumes from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts.lake_layout import range_problems, scan_topic
from processors.lake.erasure import (
    USER_TOPICS,
    UserKeys,
    erase_user,
    erasure_event,
    retain,
    user_keys,
    user_rows,
)
from schemas.enums import Outcome, RewardSource
from schemas.events import (
    EditObserved,
    Event,
    FeatureUpdate,
    Reward,
    SuggestionOutcome,
    TestRunCompleted,
)
from tests.analytics.lake_builder import write_lake
from tests.sample_events import PRODUCER, offered, reacted, served

T0 = datetime(2026, 3, 4, 5, tzinfo=UTC)
VICTIM = "user:" + "a" * 32
OTHERS = ("user:" + "b" * 32, "user:" + "c" * 32)


def _session(user: str, session: str, start: datetime) -> list[Event]:
    first = offered(session, user_id=user, event_time=start)
    t = start + timedelta(seconds=5)
    return [
        first,
        SuggestionOutcome(
            producer=PRODUCER, suggestion_id=first.suggestion_id, session_id=session,
            outcome=Outcome.ACCEPTED, accepted_chars=4, time_to_decision_ms=900, event_time=t,
        ),
        EditObserved(
            producer=PRODUCER, session_id=session, suggestion_id=None, chars_inserted=3,
            chars_deleted=1, event_time=t,
        ),
        TestRunCompleted(
            producer=PRODUCER, session_id=session, run_id=f"run-{session}", tests_passed=9,
            tests_failed=1, tests_errored=0, duration_ms=1200, suggestion_ids=(), event_time=t,
        ),
        Reward(
            producer=PRODUCER, reward_id=f"rw-{session}", source=RewardSource.SUGGESTION,
            source_id=first.suggestion_id, session_id=session, user_id=user, model_name="gate",
            model_version=0, reward=1.0, reward_components={"accepted": 1.0},
            reward_fn="tab@1", attributed_at=t, event_time=start,
        ),
        Reward(  # as written before schema v2: no user_id, found through the session
            producer=PRODUCER, reward_id=f"rw1-{session}", source=RewardSource.SUGGESTION,
            source_id=first.suggestion_id, session_id=session, model_name="gate",
            model_version=0, reward=0.0, reward_components={}, reward_fn="old@1",
            attributed_at=t, event_time=start,
        ),
        FeatureUpdate(
            producer=PRODUCER, entity_type="user_language", entity_id=f"{user}@python",
            feature_name="accept_rate_24h", window="24h", value=0.5, as_of=t,
            source_event_count=3, event_time=t,
        ),
        *_served(user, session, start),
    ]  # fmt: skip


def _served(user: str, session: str, start: datetime) -> list[Event]:
    """A completion served to the user, and one served to an API client that named no user in
    its own session, which the user reacted to: both, their feedback and Rewards are the user's."""
    named = served(session, user_id=user, event_time=start)
    anonymous = served(f"api-{session}", user_id=None, event_time=start)
    events: list[Event] = [named, reacted(named), anonymous, reacted(anonymous, user_id=user)]
    for c in (named, anonymous):
        events.append(Reward(
            producer=PRODUCER, reward_id=f"rw-{c.completion_id}", source=RewardSource.COMPLETION,
            source_id=c.completion_id, session_id=c.session_id, user_id=c.user_id,
            model_name=c.model_name, model_version=1, reward=0.5,
            reward_components={"accepted": 0.5}, reward_fn="agent_use@1", attributed_at=start,
            event_time=start,
        ))  # fmt: skip
    return events


def _events() -> list[Event]:
    events: list[Event] = []
    for u, user in enumerate((VICTIM, *OTHERS)):
        for k in range(4):  # sessions over two hours: several files and hour folders per topic
            start = T0 + timedelta(minutes=40 * k + u)
            events += _session(user, f"sess-{u}-{k}", start)
    # An hour with the victim alone: its files become zero-row files.
    return events + _session(VICTIM, "sess-0-late", T0 + timedelta(hours=3))


def _lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    write_lake(lake, _events(), partitions=2, rows_per_file=3)
    return lake


def _files(lake: Path) -> dict[Path, pa.Table]:
    return {p: pq.read_table(p) for t in USER_TOPICS for p in sorted((lake / t).rglob("*.parquet"))}


def test_erasure_leaves_no_row_of_the_user_and_every_other_row_as_it_was(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    keys = user_keys(lake, VICTIM)
    assert len(keys.suggestion_ids) == 5 and len(keys.completion_ids) == 10
    assert len(keys.session_ids) == 10  # the editor's and the API client's
    before = _files(lake)
    expected = {}
    for path, table in before.items():
        expected[path] = table.filter(pa.compute.invert(user_rows(table, keys)))
    planted = sum(t.num_rows - expected[p].num_rows for p, t in before.items())
    assert planted == 5 * 13
    assert {"agent.completions", "agent.feedback"} <= {p.parts[len(lake.parts)] for p in before}

    report = erase_user(lake, VICTIM)

    assert sum(report.rows_removed.values()) == planted
    after = _files(lake)
    assert after.keys() == before.keys()  # same names: offset ranges (and sink resume) intact
    for path, table in after.items():
        assert table.schema == before[path].schema, path  # zero-row files keep the schema
        assert table.equals(expected[path]), path  # other users' rows: same count, same content
    assert any(t.num_rows == 0 for t in after.values())
    for topic in USER_TOPICS:
        for files in scan_topic(lake, topic).files.values():
            assert range_problems(files, start=0) == []
    _assert_no_trace(lake, keys)
    for other in OTHERS:
        assert len(user_keys(lake, other).session_ids) == 8


def _assert_no_trace(lake: Path, keys: UserKeys) -> None:
    # Every column of every file, as text: the user's ids appear nowhere in the lake's topics.
    ids = {VICTIM, *keys.session_ids, *keys.suggestion_ids, *keys.completion_ids}
    for path in sorted(lake.glob("*/**/*.parquet")):
        if "privacy.erasures" in path.parts:
            continue
        for row in pq.read_table(path).to_pylist():
            text = repr(row)
            assert not any(i in text for i in ids), (path, row)


def test_a_rerun_removes_nothing_and_the_event_counts_what_was_removed(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    first = erase_user(lake, VICTIM, erasure_id="e1")
    again = erase_user(lake, VICTIM, erasure_id="e2")
    assert sum(again.rows_removed.values()) == 0 and again.files_rewritten == []
    first.dead_letters_removed = {"dlq.late": 2}
    event = erasure_event(first, producer="flywheel.privacy/test")
    assert (event.erasure_id, event.user_id, event.rows_removed) == ("e1", VICTIM, 65)
    assert event.files_rewritten == len(first.files_rewritten) > 0
    assert event.rows_by_topic == {**first.rows_removed, "dlq.late": 2}


def test_a_row_naming_another_user_stays_whatever_ids_it_shares() -> None:
    keys = UserKeys(VICTIM, frozenset({"sug"}), frozenset({"sess"}), frozenset({"cmpl:0"}))
    table = pa.table({
        "user_id": [VICTIM, OTHERS[0], None, None, None],
        "session_id": ["x", "sess", "sess", "y", "z"],
        "completion_id": ["x", "cmpl:0", "w", "cmpl:0", "w"],
    })  # fmt: skip
    assert user_rows(table, keys).to_pylist() == [True, False, True, True, False]
    rewards = pa.table(
        {"source_id": ["sug", "cmpl:0", "ro-1"], "user_id": pa.nulls(3, pa.string())}
    )
    assert user_rows(rewards, keys).to_pylist() == [True, True, False]


def test_every_topic_with_a_user_column_is_erased_but_the_erasure_record() -> None:
    assert set(USER_TOPICS) == {
        "telemetry.suggestions", "telemetry.outcomes", "telemetry.edits", "telemetry.tests",
        "agent.completions", "agent.feedback", "rewards", "features.updates",
        "agent.tool_calls",  # by session_id: a served session's calls (rollouts have none)
    }  # fmt: skip


def test_retention_drops_old_hours_but_keeps_each_partitions_newest_file(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    hours = sorted({p.parent for p in (lake / "rewards").rglob("*.parquet")})
    assert len(hours) == 4  # 05, 06, 07, 08
    report = retain(lake, days=1, now=T0 + timedelta(days=1, hours=2, minutes=30))
    # Only hours ending before 05:00+2h30 next day minus 1 day = 07:30: 05 and 06 qualify.
    kept = {p for p in report.kept_for_resume if "rewards" in p.parts}
    deleted = {p for p in report.deleted if "rewards" in p.parts}
    assert deleted | kept == set(hours[:2]) and not deleted & kept
    for files in scan_topic(lake, "rewards").files.values():
        assert files  # every partition still has a file to resume from
    assert hours[2].is_dir()
    with pytest.raises(Exception, match="longer than 0 days"):
        retain(lake, days=0)
