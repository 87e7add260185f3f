"""Lake compaction without a broker: which files merge, the merged file, recovery, the lock."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analytics.catalog import Catalog
from contracts.lake_layout import (
    LakeFile,
    file_name,
    file_path,
    hour_of,
    range_problems,
    scan_topic,
)
from ground.store import Store
from processors.lake.compaction import (
    CompactionRun,
    compact_lake,
    merge_run,
    merged_table,
    plan,
    select_runs,
)
from processors.lake.erasure import erase_user
from processors.lake.errors import MaintenanceLockError
from processors.lake.maintenance import LOCK_NAME, maintenance_lock
from processors.lake.resume import prepare_partitions
from processors.lake.writer import write_parquet_atomically
from schemas.enums import RewardSource
from schemas.events import Event, Reward
from streams.topics import REWARDS_TOPIC, SUGGESTIONS_TOPIC
from tests.analytics.lake_builder import write_lake
from tests.sample_events import PRODUCER, offered

T0 = datetime(2026, 3, 4, 5, tzinfo=UTC)
LATER = T0 + timedelta(days=1)  # every hour of the test lakes is closed by then
USERS = ("user:" + "a" * 32, "user:" + "b" * 32, "user:" + "c" * 32)


def _file(first: int, last: int, hour: str = "h1") -> LakeFile:
    return LakeFile("t", 0, first, last, str(Path(hour) / file_name("t", 0, first, last)))


def _runs(files: list[LakeFile], sizes: list[int], target: int) -> list[list[tuple[int, int]]]:
    by_path = {f.path: s for f, s in zip(files, sizes, strict=True)}
    return [[(f.first, f.last) for f in r.files] for r in select_runs(files, by_path, target)]


def test_contiguous_small_files_of_one_hour_make_one_run() -> None:
    files = [_file(0, 9), _file(10, 19), _file(20, 29)]
    assert _runs(files, [1, 1, 1], 100) == [[(0, 9), (10, 19), (20, 29)]]
    assert _runs(files[:1], [1], 100) == []  # one file: nothing to merge


def test_a_file_of_another_hour_in_between_breaks_the_run() -> None:
    files = [_file(0, 9), _file(10, 19, "h2"), _file(20, 29), _file(30, 39), _file(40, 49, "h2")]
    # h1 holds 0-9, 20-29, 30-39: only the last two follow each other; h2's are not contiguous.
    assert _runs(files, [1] * 5, 100) == [[(20, 29), (30, 39)]]


def test_runs_stay_under_the_target_and_large_files_are_left_alone() -> None:
    files = [_file(10 * i, 10 * i + 9) for i in range(7)]
    sizes = [40, 40, 40, 100, 30, 30, 0]  # 100 >= target: never merged, and breaks the run
    assert _runs(files, sizes, 100) == [[(0, 9), (10, 19)], [(40, 49), (50, 59), (60, 69)]]


def _table(offsets: list[int], extra: bool = False) -> pa.Table:
    columns = {"value": pa.array([f"v{o}" for o in offsets], pa.string())}
    if extra:
        columns["added_in_v2"] = pa.array([1.5] * len(offsets), pa.float64())
    columns["_offset"] = pa.array(offsets, pa.int64())
    return pa.table(columns)


def test_a_merged_file_keeps_row_order_unions_schemas_and_covers_zero_row_files(
    tmp_path: Path,
) -> None:
    hour = hour_of(T0)
    parts = [([0, 1], False), ([], False), ([3, 4], True)]  # offset 2: a dead letter
    ranges = [(0, 1), (2, 2), (3, 4)]
    files = []
    for (offsets, extra), (first, last) in zip(parts, ranges, strict=True):
        path = file_path(tmp_path, "t", 0, first, last, hour)
        write_parquet_atomically(_table(offsets, extra), path)
        files.append(LakeFile("t", 0, first, last, str(path)))
    run = CompactionRun(tuple(files), 0)
    merge_run(run, Store.at(tmp_path))
    target = Path(run.target)
    assert target.name == "t+0+0+4.parquet"
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    merged = pq.read_table(target)
    assert merged["_offset"].to_pylist() == [0, 1, 3, 4]
    assert merged["added_in_v2"].to_pylist() == [None, None, 1.5, 1.5]
    assert merged_table([run.target], Store.at(tmp_path)).equals(merged)


def _events() -> list[Event]:
    events: list[Event] = []
    for k in range(60):  # six hours, three users
        user = USERS[k % 3]
        first = offered(f"sess-{k}", user_id=user, event_time=T0 + timedelta(minutes=6 * k))
        events.append(first)
        events.append(
            Reward(
                producer=PRODUCER, reward_id=f"rw-{k}", source=RewardSource.SUGGESTION,
                source_id=first.suggestion_id, session_id=f"sess-{k}", user_id=user,
                model_name="gate", model_version=0, reward=k / 60,
                reward_components={"accepted": 1.0}, reward_fn="tab@1",
                attributed_at=first.event_time, event_time=first.event_time,
            )
        )  # fmt: skip
    return events


def _lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    write_lake(lake, _events(), partitions=2, rows_per_file=2)
    return lake


def _answers(lake: Path) -> tuple[object, ...]:
    with Catalog(lake).connect() as con:
        counts = con.execute(
            "select (select count(*) from telemetry_suggestions), (select count(*) from rewards)"
        ).fetchone()
        by_user = con.execute(
            "select user_id, count(*), round(sum(reward), 6) from rewards group by 1 order by 1"
        ).fetchall()
    return counts, by_user


def _files(lake: Path, topic: str) -> dict[int, list[LakeFile]]:
    return scan_topic(lake, topic).files


def test_compaction_keeps_ranges_resume_offsets_and_the_views_answers(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    before = {t: _files(lake, t) for t in (SUGGESTIONS_TOPIC, REWARDS_TOPIC)}
    answers = _answers(lake)
    report = compact_lake(lake, now=LATER)
    for topic, files in before.items():
        after = _files(lake, topic)
        stats = report.topics[topic]
        assert stats.files_before == sum(map(len, files.values()))
        assert stats.files_after == sum(map(len, after.values())) < stats.files_before
        assert len(after) == len(files)
        for partition, old in files.items():
            assert range_problems(after[partition], start=0) == []
            assert after[partition][-1].last == old[-1].last  # the sink resumes where it did
            assert after[partition][-1] == old[-1]  # the newest file is never merged
            hours = {Path(f.path).parent for f in old}
            assert len(after[partition]) == len(hours) + 1  # one a closed hour, and the newest
    assert _answers(lake) == answers
    assert list(lake.rglob("*.tmp")) == []
    assert compact_lake(lake, now=LATER).topics[REWARDS_TOPIC].runs == 0  # nothing left to do


def test_open_hours_and_a_dry_run_are_left_as_they_are(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    names = sorted(p.name for p in lake.rglob("*.parquet"))
    dry = compact_lake(lake, now=LATER, dry_run=True)
    assert dry.topics[REWARDS_TOPIC].runs > 0
    assert sorted(p.name for p in lake.rglob("*.parquet")) == names
    # Three hours after T0, with an hour's grace: only the first two hours are closed.
    now = T0 + timedelta(hours=3)
    compact_lake(lake, now=now, min_age_s=3600)
    for files in _files(lake, REWARDS_TOPIC).values():
        for f in files:
            closed_hour = Path(f.path).parent.name in ("hour=05", "hour=06")
            assert closed_hour == (f.last - f.first + 1 > 2), f.path  # merged iff closed


def test_retention_in_the_same_run_drops_old_hours(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    report = compact_lake(lake, now=T0 + timedelta(days=2), retention_days=1.0)
    assert report.retention is not None and report.retention.deleted
    kept = {p.parent.name for p in (lake / REWARDS_TOPIC).rglob("*.parquet")}
    assert kept == {"hour=10"}  # only the hour of each partition's newest file


def test_erasure_after_compaction_removes_exactly_the_users_rows(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    compact_lake(lake, now=LATER)
    report = erase_user(lake, USERS[0])
    assert report.rows_removed[SUGGESTIONS_TOPIC] == report.rows_removed[REWARDS_TOPIC] == 20
    with Catalog(lake).connect() as con:
        users = con.execute("select distinct user_id from rewards order by 1").fetchall()
        assert users == [(USERS[1],), (USERS[2],)]
        assert con.execute("select count(*) from telemetry_suggestions").fetchone() == (40,)


def test_a_compaction_killed_between_rename_and_deletes_is_recovered(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    answers = _answers(lake)
    resume = prepare_partitions(Store.at(lake), [(REWARDS_TOPIC, 0), (REWARDS_TOPIC, 1)])
    store = Store.at(lake)
    runs, _ = plan(store, REWARDS_TOPIC, now=LATER, min_age_s=3600, target_bytes=2**27)
    for run in runs:  # merge_run's first step only: the inputs are left behind
        merged = merged_table([f.path for f in run.files], store)
        write_parquet_atomically(merged, Path(run.target))
    scan = scan_topic(lake, REWARDS_TOPIC)
    left = {f.path for files in scan.superseded.values() for f in files}
    assert left == {f.path for r in runs for f in r.files}
    for files in scan.files.values():
        assert range_problems(files, start=0) == []
    assert _answers(lake) == answers  # the views keep one row per reward_id / event_id
    # The sink taking partition 0 deletes its superseded files; the lock deletes the rest.
    assert prepare_partitions(Store.at(lake), [(REWARDS_TOPIC, 0)]) == {
        (REWARDS_TOPIC, 0): resume[REWARDS_TOPIC, 0]
    }
    assert 0 not in scan_topic(lake, REWARDS_TOPIC).superseded
    assert scan_topic(lake, REWARDS_TOPIC).superseded
    with maintenance_lock(lake):
        assert scan_topic(lake, REWARDS_TOPIC).superseded == {}
    assert not any(Path(p).exists() for p in left)
    assert _answers(lake) == answers


def test_erasure_and_compaction_wait_for_a_maintenance_lock_held_elsewhere(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(60)", str(lake / LOCK_NAME)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(MaintenanceLockError), maintenance_lock(lake, wait_s=0.3):
            pass
    finally:
        holder.kill()
        holder.wait()
    with maintenance_lock(lake, wait_s=0.3), maintenance_lock(lake, wait_s=0.3):
        report = erase_user(lake, USERS[1])  # re-entrant within a process (as compaction is)
    assert report.rows_removed[REWARDS_TOPIC] == 20


def test_another_thread_waits_for_the_lock_like_another_process(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    errors: list[BaseException] = []

    def second() -> None:
        try:
            with maintenance_lock(lake, wait_s=0.3):
                pass
        except MaintenanceLockError as exc:
            errors.append(exc)

    with maintenance_lock(lake):
        thread = threading.Thread(target=second)
        thread.start()
        thread.join()
    assert len(errors) == 1
