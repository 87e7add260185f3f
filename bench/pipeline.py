"""Benchmark: the reward joiner and the lake sink on simulator events, latency and crash safety.

(a) Joiner: the first `--events` events of the default simulator fleet (offers with code text,
outcomes, edits, test runs, rollouts) go to this run's own copies of the platform topics; the
baseline consumes the *same records* with confluent-kafka and Avro-decodes them (no state, no
output); then `python -m flywheel process` (exactly-once; 10 days of allowed lateness, so
nothing is attributed while the input flows and the final ticks attribute everything) drains
them. The joiner's rate is counted from its first processed event to its last (startup and group
join excluded, read from its 0.2 s status lines); per core = events / CPU seconds of the worker.
The faust floor: `bench/faust_floor.py`, a no-op faust agent configured as the joiner, drains
the same records; its events per CPU-second bound what any faust-based joiner can reach. The
joiner and the floor alternate `--repeats` times (medians). Two workers in one group drain the
same records too (`--scale-out`), timed from when both have applied events.
(b) Sink rows/s vs decode + pyarrow write, and (c) event time -> visible-in-lake latency:
`bench/pipeline_sink.py`'s measurements, imported (they print their own tables).
(d) `--crash`: the joiner and a lake sink (both subprocesses) run on the input while it is
being produced and are SIGKILLed `--kills` times at random moments (the joiner 0.5-4 s after a
(re)started worker applied its first event), restarted each time; `--workers N` runs N joiner
workers in one group (rebalances, standby tables) and kills one of them at random; then
the lake must hold every produced event_id exactly once per topic with contiguous, non
overlapping file offset ranges per partition, and the Rewards (reward_id -> value) must equal a
crash-free joiner run's on the same input, each committed once (read_committed).

    .venv/bin/python -m bench.pipeline --events 100000
    .venv/bin/python -m bench.pipeline --events 100000 --crash --kills 4
    .venv/bin/python -m bench.pipeline --events 100000 --crash --kills 6 --workers 2
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from bench import pipeline_sink
from bench.procfs import cpu_seconds
from bench.produce import make_events
from bench.raw_producer import produce_all
from flywheel.clients import codec as make_codec
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from schemas.events import EditObserved
from streams.admin import TopicAdmin
from streams.client import ROUTES
from streams.serde import AvroCodec
from streams.topics import COMPLETION_TOPICS, TELEMETRY_TOPICS, TopicSpec

ROOT = Path(__file__).resolve().parents[1]
TELEMETRY = TELEMETRY_TOPICS
ROLLOUTS = "rollouts.results"
SERVED = COMPLETION_TOPICS  # the completion join reads copies too
HOUR_MS = 3_600_000
STATUS = re.compile(r"process: ([\d,]+) events")

# So that every run attributes the same way whatever the fetch timing, the bench allows 10 days
# of lateness (nothing is attributed while the input flows) and, once the input is consumed,
# sends one "tick" edit per partition 11 days after the last event; `--idle-after 0` lets that one
# topic's watermark pass every deadline, and every suggestion is attributed with all its events.
LATENESS_S = 864_000
CATCH_UP_S = 300.0  # the crash run: a joiner not caught up this long after its input stopped
TICK_AFTER = timedelta(days=11)

Payload = tuple[str, bytes, bytes]  # (platform topic, key, Avro value)


@dataclass
class Topics:
    """One bench run's own copies of the platform topics (deleted by retention after an hour)."""

    prefix: str = field(default_factory=lambda: f"bench.pipeline.{uuid.uuid4().hex[:8]}")

    def of(self, platform: str) -> str:
        return f"{self.prefix}.{platform}"

    @property
    def rewards(self) -> str:
        return self.of("rewards")

    def sources(self) -> list[str]:
        return [self.of(t) for t in (*TELEMETRY, ROLLOUTS)]

    def create(self, settings: Settings) -> None:
        four = [*self.sources(), *(self.of(t) for t in SERVED), self.rewards]
        ones = [self.of(t) for t in ("dlq.late", "dlq.joiner", "dlq.sink")]
        TopicAdmin(settings.kafka_client_config()).ensure(
            [TopicSpec(n, "session_id", "bench", 4, retention_ms=HOUR_MS) for n in four]
            + [TopicSpec(n, "original key", "bench", 1, retention_ms=HOUR_MS) for n in ones]
        )

    def joiner_args(self, app_id: str) -> list[str]:
        args = [
            a for t in (*TELEMETRY, *SERVED, ROLLOUTS) for a in ("--topic", f"{self.of(t)}={t}")
        ]
        return [
            *args, "--rewards-topic", self.rewards,
            "--late-dlq-topic", self.of("dlq.late"), "--dlq-topic", self.of("dlq.joiner"),
            "--group", app_id, "--allowed-lateness", str(LATENESS_S), "--idle-after", "0",
            "--session-timeout", "6",
        ]  # fmt: skip

    def sink_args(self, lake: Path, group: str) -> list[str]:
        platform = [*TELEMETRY, ROLLOUTS, "rewards"]
        args = [a for t in platform for a in ("--topic", f"{self.of(t)}={t}")]
        return [
            *args, "--lake", str(lake), "--group", group,
            "--instance-id", f"{group}-0", "--dlq-topic", self.of("dlq.sink"),
            "--max-age", "2s", "--status-every", "1s",
        ]  # fmt: skip


def payloads(codec: AvroCodec, n: int) -> list[Payload]:
    """The first `n` simulator events, encoded like the SDK does, with their routing key."""
    out = []
    for event in make_events(n):
        topic, key_field = ROUTES[type(event)]
        out.append(
            (topic, str(getattr(event, key_field)).encode(), codec.encode_event(topic, event))
        )
    return out


def last_event_time(codec: AvroCodec, data: Sequence[Payload]) -> datetime:
    times: list[datetime] = [codec.decode(t, v)["event_time"] for t, _, v in data]
    return max(times)


def send_ticks(settings: Settings, codec: AvroCodec, topics: Topics, at: datetime) -> list[str]:
    """One EditObserved per partition of the edits copy at `at` (no suggestion: it only moves
    the partition's watermark); their event ids."""
    producer = Producer(settings.kafka_client_config())
    ids = []
    for p in range(4):
        tick = EditObserved(
            producer="bench/pipeline", event_time=at, session_id=f"bench-tick-{p}",
            chars_inserted=1, chars_deleted=0,
        )  # fmt: skip
        value = codec.encode_event("telemetry.edits", tick)
        producer.produce(topics.of("telemetry.edits"), value, tick.session_id.encode(), partition=p)
        ids.append(tick.event_id)
    if producer.flush(30) != 0:
        raise RuntimeError("the ticks were not delivered")
    return ids


def caught_up(settings: Settings, group: str, topics: Topics) -> bool:
    """Whether `group` has committed every source partition up to its end (False when the
    broker does not answer in time: the caller asks again)."""
    try:
        return not behind(settings, group, topics)
    except KafkaException as exc:  # a busy shared broker times out now and then
        print(f"caught_up: {exc}; asking again", flush=True)
        return False


def behind(settings: Settings, group: str, topics: Topics) -> list[str]:
    """`topic/partition committed < end` for each source partition `group` has not committed
    to its end."""
    c = consumer(settings, group)
    try:
        tps = [TopicPartition(t, p) for t in topics.sources() for p in range(4)]
        out = []
        for tp in c.committed(tps, timeout=10):
            _, high = c.get_watermark_offsets(tp, timeout=10)
            if tp.offset < high:
                out.append(f"{tp.topic}/{tp.partition} {tp.offset} < {high}")
        return out
    finally:
        c.close()


def wait_caught_up(settings: Settings, group: str, topics: Topics, limit_s: float) -> None:
    """Until `group` has committed every source partition to its end; raises naming the
    partitions still behind after `limit_s` (a joiner whose commits stopped, not a slow one:
    the crash run's input is all there by then)."""
    deadline = time.monotonic() + limit_s
    while not caught_up(settings, group, topics):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{group} has not committed these partitions to their end after {limit_s:.0f} s: "
                + "; ".join(behind(settings, group, topics))
            )
        time.sleep(2)


def fill(settings: Settings, topics: Topics, data: Sequence[Payload]) -> None:
    config = {
        **settings.kafka_client_config(), "linger.ms": 20, "compression.type": "zstd",
        "partitioner": "murmur2_random", "enable.idempotence": True,
    }  # fmt: skip
    produce_all(config, ((topics.of(t), k, v) for t, k, v in data))


def fill_paced(settings: Settings, topics: Topics, data: Sequence[Payload], rate: int) -> None:
    """`fill` at about `rate` events/s (in 1 s chunks), so crashes land while events flow."""
    for start in range(0, len(data), rate):
        began = time.monotonic()
        fill(settings, topics, data[start : start + rate])
        time.sleep(max(0.0, 1 - (time.monotonic() - began)))


def consumer(settings: Settings, group: str) -> Consumer:
    return Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def baseline_rate(settings: Settings, codec: AvroCodec, topics: Topics, n: int) -> float:
    """Events/s of confluent-kafka consume + Avro decode of the source topics (first record
    excluded: the group join is not counted)."""
    platform = {topics.of(t): t for t in (*TELEMETRY, ROLLOUTS)}
    c = consumer(settings, f"{topics.prefix}.baseline")
    c.subscribe(list(platform))
    seen, start = 0, 0.0
    while seen < n:
        for m in c.consume(1000, 1.0):
            if m.error() is not None:
                continue
            codec.decode(platform[m.topic()], m.value())  # type: ignore[index,arg-type]
            seen += 1
            if seen == 1:
                start = time.perf_counter()
    c.close()
    return (n - 1) / (time.perf_counter() - start)


class Proc:
    """A `python -m flywheel COMMAND ...` subprocess whose stderr lines are watched in a thread."""

    def __init__(self, command: str, args: list[str], log: Path, module: str = "flywheel") -> None:
        """`python -m MODULE COMMAND ARGS...`; an empty `command` runs the module alone."""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *([command] if command else []), *args],
            env=env,
            stdout=self.log,
            stderr=subprocess.PIPE,
        )
        self.events = 0
        self.first_at: float | None = None
        self.first_events = 0
        self.last_at = 0.0
        self.first_cpu_s = 0.0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stderr
        if stream is None:
            return
        for line in stream:
            self.log.write(line)
            match = STATUS.search(line.decode(errors="replace"))
            if match:
                events = int(match.group(1).replace(",", ""))
                now = time.perf_counter()
                if events > 0 and self.first_at is None:
                    self.first_at, self.first_events = now, events
                    self.first_cpu_s = self.cpu_s()
                if events > self.events:
                    self.events, self.last_at = events, now

    def wait_events(self, n: int) -> None:
        """Until its status line counts `n` events; raises if the process exits first."""
        while self.events < n:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.proc.args[2]} exited early; see {self.log.name}")
            time.sleep(0.05)

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process so far (Linux /proc)."""
        return cpu_seconds(self.proc.pid)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout_s: float = 60) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


def joiner_rate(
    settings: Settings,
    codec: AvroCodec,
    topics: Topics,
    data: Sequence[Payload],
    app_id: str,
    log: Path,
) -> tuple[float, float]:
    """(events/s, events per CPU second) of one joiner worker draining `data` from `topics`,
    then the ticks (which attribute everything still pending)."""
    args = [*topics.joiner_args(app_id), "--status-every", "200ms"]
    worker = Proc("process", args, log)
    for n in (len(data), len(data) + 4):
        worker.wait_events(n)
        if n == len(data):
            send_ticks(settings, codec, topics, last_event_time(codec, data) + TICK_AFTER)
    done = n - worker.first_events  # counted from the first status line with events
    cpu = worker.cpu_s() - worker.first_cpu_s
    while not caught_up(settings, app_id, topics):  # its last transaction is committed
        time.sleep(0.5)
    worker.stop()
    first_at = worker.first_at or worker.last_at
    return done / max(worker.last_at - first_at, 1e-9), done / max(cpu, 1e-9)


def group_rate(settings: Settings, topics: Topics, n: int, app_id: str, log: Path) -> float:
    """Events/s (wall) of two joiner workers in one group draining the `n` records already in
    `topics`, counted from the moment both have applied events (the group formed: a worker
    that got partitions first is stopped by the rebalance the second one's join causes, which
    is start-up, as the one-worker rate's group join is) to the last event of both."""
    args = [*topics.joiner_args(app_id), "--status-every", "200ms"]
    workers = [Proc("process", args, log.with_suffix(f".{i}.log")) for i in range(2)]
    try:
        start: tuple[float, int] | None = None  # (when both had applied events, events then)
        while sum(w.events for w in workers) < n:
            if any(w.proc.poll() is not None for w in workers):
                raise RuntimeError(f"a joiner worker exited early; see {log.parent}")
            if start is None and all(w.first_at is not None for w in workers):
                start = (time.perf_counter(), sum(w.events for w in workers))
            time.sleep(0.05)
        if start is None:  # one worker drained everything before the other applied any
            raise RuntimeError(f"the second joiner worker never applied an event; see {log.parent}")
        counted = sum(w.events for w in workers) - start[1]
        return counted / max(max(w.last_at for w in workers) - start[0], 1e-9)
    finally:
        for w in workers:
            w.stop()


def floor_rate(settings: Settings, topics: Topics, n: int, app_id: str, log: Path) -> float:
    """Events per CPU-second of `bench/faust_floor.py` (a no-op faust agent) draining the same
    `n` records (its first status line with events excluded, as for the joiner)."""
    worker = Proc(
        "",
        ["--app-id", app_id, "--broker", settings.kafka_bootstrap, "--datadir",
         str(log.with_suffix(".data")), *topics.sources()],
        log,
        module="bench.faust_floor",
    )  # fmt: skip
    worker.wait_events(n)
    cpu = worker.cpu_s() - worker.first_cpu_s
    worker.stop()
    return (worker.events - worker.first_events) / max(cpu, 1e-9)


def read_rewards(settings: Settings, codec: AvroCodec, topic: str) -> tuple[dict[str, float], int]:
    """reward_id -> reward of every committed Reward in `topic` (read until 5 s of silence),
    and the number of committed records read: more than the ids means one was committed twice."""
    c = consumer(settings, f"{topic}.reader.{uuid.uuid4().hex[:6]}")
    c.subscribe([topic])
    out: dict[str, float] = {}
    records = 0
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 5:
        batch = [m for m in c.consume(1000, 0.5) if m.error() is None]
        if batch:
            quiet_since = time.monotonic()
        records += len(batch)
        for m in batch:
            record = codec.decode("rewards", m.value())  # type: ignore[arg-type]
            out[str(record["reward_id"])] = float(record["reward"])
    c.close()
    return out, records


def lake_check(
    codec: AvroCodec, lake: Path, topics: Topics, data: Sequence[Payload], extra: Sequence[str]
) -> list[str]:
    """Problems found in the lake: event_ids not exactly once per topic, file offset ranges
    per partition that overlap or leave gaps."""
    import pyarrow.parquet as pq

    from contracts.lake_layout import parse_file_name

    problems: list[str] = []
    produced: dict[str, set[str]] = {t: set() for t in (*TELEMETRY, ROLLOUTS)}
    for t, _, v in data:
        produced[t].add(str(codec.decode(t, v)["event_id"]))
    produced["telemetry.edits"].update(extra)  # the ticks
    for platform in (*TELEMETRY, ROLLOUTS):
        files = sorted(lake.glob(f"{topics.of(platform)}/**/*.parquet"))
        ids: list[str] = []
        ranges: dict[int, list[tuple[int, int]]] = {}
        for path in files:
            meta = parse_file_name(path)
            if meta is None:
                continue
            ranges.setdefault(meta.partition, []).append((meta.first, meta.last))
            ids += [str(i) for i in pq.read_table(path, columns=["event_id"]).column(0).to_pylist()]
        expected = produced[platform]
        if len(ids) != len(expected) or set(ids) != expected:
            problems.append(
                f"{platform}: {len(ids)} rows, {len(set(ids))} ids, {len(expected)} produced, "
                f"{len(expected - set(ids))} missing"
            )
        for partition, spans in ranges.items():
            spans.sort()
            if spans[0][0] != 0:
                problems.append(f"{platform}/{partition}: first file starts at {spans[0][0]}")
            for (a0, a1), (b0, _) in itertools.pairwise(spans):
                if b0 != a1 + 1:
                    problems.append(f"{platform}/{partition}: [{a0},{a1}] then {b0}")
    return problems


def crash_run(
    settings: Settings,
    codec: AvroCodec,
    data: Sequence[Payload],
    kills: int,
    rate: int,
    log_dir: Path,
    workers: int = 1,
) -> tuple[dict[str, float], int, list[str], int]:
    """Joiner (`workers` workers in one group) + sink on a fresh copy of the topics while `data`
    is produced, SIGKILLed `kills` times in turn (a random joiner worker, then the sink) at
    random moments and restarted. (rewards, Reward records committed, lake problems, kills)."""
    topics = Topics()
    topics.create(settings)
    lake = log_dir / "lake"
    app_id = f"{topics.prefix}.joiner"
    joiner_args = [*topics.joiner_args(app_id), "--status-every", "1s"]
    sink_args = topics.sink_args(lake, f"{topics.prefix}.sink")
    filler = threading.Thread(target=fill_paced, args=(settings, topics, data, rate))
    filler.start()

    def start(name: str) -> Proc:
        if name == "sink":
            return Proc("sink", sink_args, log_dir / "crash-sink.log")
        return Proc("process", joiner_args, log_dir / f"crash-{name}.log")

    joiners = ["joiner"] if workers == 1 else [f"joiner-{i}" for i in range(workers)]
    procs = {name: start(name) for name in (*joiners, "sink")}
    rng = random.Random()
    done = 0
    for k in range(kills):
        name = rng.choice(joiners) if k % 2 == 0 else "sink"  # alternate, at random moments
        if name != "sink":
            # A worker still starting up (group join, recovery: ~10 s) has nothing to lose:
            # kill it 0.5-4 s after it has applied its first event (or 60 s, whichever first).
            started = time.monotonic()
            while procs[name].first_at is None and time.monotonic() - started < 60:
                time.sleep(0.2)
            time.sleep(rng.uniform(0.5, 4))
        else:
            time.sleep(rng.uniform(3, 12))
        procs[name].proc.send_signal(signal.SIGKILL)
        procs[name].proc.wait()
        done += 1
        applied = f" after {procs[name].events:,} events" if name != "sink" else ""
        print(f"crash {k + 1}/{kills}: SIGKILLed the {name}{applied}; restarting it", flush=True)
        procs[name] = start(name)
    filler.join()
    tick_ids: list[str] = []
    for ticks in (False, True):
        if ticks:
            tick_ids = send_ticks(
                settings, codec, topics, last_event_time(codec, data) + TICK_AFTER
            )
        wait_caught_up(settings, app_id, topics, CATCH_UP_S)
        print(f"the joiner caught up{' with the ticks' if ticks else ''}", flush=True)
    for name in joiners:
        procs[name].stop()
    rewards, records = read_rewards(settings, codec, topics.rewards)
    while not caught_up(settings, f"{topics.prefix}.sink", topics):
        time.sleep(2)  # the sink's last files (max-age 2 s) and commits
    procs["sink"].stop()
    return rewards, records, lake_check(codec, lake, topics, data, tick_ids), done


def crash_free_rewards(
    settings: Settings, codec: AvroCodec, data: Sequence[Payload], log_dir: Path
) -> dict[str, float]:
    topics = Topics()
    topics.create(settings)
    fill(settings, topics, data)
    app_id = f"{topics.prefix}.joiner"
    joiner_rate(settings, codec, topics, data, app_id, log_dir / "clean-joiner.log")
    return read_rewards(settings, codec, topics.rewards)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sink-rounds", type=int, default=1, help="0 skips (b)")
    parser.add_argument("--paced-s", type=float, default=15.0, help="(c) duration; 0 skips")
    parser.add_argument("--crash", action="store_true", help="(d) only: the crash check")
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--rate", type=int, default=4000, help="--crash: events/s produced")
    parser.add_argument(
        "--workers", type=int, default=1, help="--crash: joiner workers in one group"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="(a): joiner and faust floor runs, alternating"
    )
    parser.add_argument(
        "--scale-out", action=argparse.BooleanOptionalAction, default=True,
        help="(a) also: two workers in one group drain the same records (wall-clock ratio)",
    )  # fmt: skip
    args = parser.parse_args()
    console = Console()
    settings = Settings.from_env()
    ensure_infrastructure(settings, lambda _: None)
    codec = make_codec(settings)
    print(f"encoding {args.events:,} simulator events", flush=True)
    data = payloads(codec, args.events)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    print(f"logs and lakes under {log_dir}", flush=True)
    figures = Table("figure", "value")
    if args.crash:
        print("crash-free joiner run", flush=True)
        clean = crash_free_rewards(settings, codec, data, log_dir)
        print(f"{len(clean):,} rewards; now the crash run", flush=True)
        crashed, records, problems, kills = crash_run(
            settings, codec, data, args.kills, args.rate, log_dir, args.workers
        )
        for problem in problems:
            console.print(f"[red]lake: {problem}")
        figures.add_row("kills (joiner or sink)", str(kills))
        figures.add_row("lake: event_ids once, ranges contiguous", "ok" if not problems else "FAIL")
        same = crashed == clean
        figures.add_row("rewards committed twice (crash run)", f"{records - len(crashed):,}")
        figures.add_row(
            "rewards equal to crash-free run",
            f"{'ok' if same else 'FAIL'} ({len(crashed):,} vs {len(clean):,})",
        )
        console.print(figures)
        sys.exit(0 if same and records == len(crashed) and not problems else 1)
    topics = Topics()
    topics.create(settings)
    print(f"producing to {topics.prefix}.*", flush=True)
    fill(settings, topics, data)
    base = baseline_rate(settings, codec, topics, len(data))
    print(f"baseline consume + decode: {base:,.0f} events/s; now the joiner", flush=True)
    # The joiner and the faust floor alternate, `--repeats` times each on the same records
    # (fresh app ids): one floor run alone moved 8.3k-13.1k events per CPU-second between runs.
    runs: list[tuple[float, float, float]] = []  # (events/s, per CPU-second, floor per CPU-s)
    for i in range(args.repeats):
        app_id, log = f"{topics.prefix}.joiner-{i}", log_dir / f"joiner-{i}.log"
        rate, per_cpu = joiner_rate(settings, codec, topics, data, app_id, log)
        print(f"the faust floor: a no-op agent on the same records (run {i + 1})", flush=True)
        floor = floor_rate(
            settings, topics, len(data), f"{topics.prefix}.floor-{i}", log_dir / f"floor-{i}.log"
        )
        print(f"joiner {per_cpu:,.0f} vs floor {floor:,.0f} events per CPU-second", flush=True)
        runs.append((rate, per_cpu, floor))
    rate, per_cpu, floor = (statistics.median(r[k] for r in runs) for k in range(3))
    ratios = sorted(r[1] / r[2] for r in runs)
    figures.add_row("(a) baseline consume+decode events/s", f"{base:,.0f}")
    figures.add_row("(a) joiner events/s (1 worker, median)", f"{rate:,.0f}")
    figures.add_row("(a) joiner / baseline", f"{rate / base:.3f}x")
    figures.add_row("(a) joiner events per CPU-second (median)", f"{per_cpu:,.0f}")
    figures.add_row("(a) faust no-op agent events per CPU-second (median)", f"{floor:,.0f}")
    figures.add_row("(a) joiner / faust no-op agent (per CPU-second)", f"{per_cpu / floor:.3f}x")
    if len(runs) > 1:
        per_run = ", ".join(f"{r:.3f}x" for r in ratios)
        figures.add_row("(a) ... per run, lowest to highest", per_run)
    if args.scale_out:
        print("two joiner workers in one group drain the same records", flush=True)
        two = group_rate(
            settings, topics, len(data), f"{topics.prefix}.group2", log_dir / "group2.log"
        )
        figures.add_row("(a) two workers events/s (wall)", f"{two:,.0f}")
        figures.add_row("(a) two workers / one worker (wall, median)", f"{two / rate:.2f}x")
    if args.sink_rounds > 0:
        print("(b) sink vs decode + pyarrow (bench/pipeline_sink.py)", flush=True)
        pipeline_sink.throughput(settings, codec, args.events, args.sink_rounds, console)
    if args.paced_s > 0:
        print("(c) event time -> visible in lake (bench/pipeline_sink.py)", flush=True)
        pipeline_sink.latency(settings, codec, 2000, args.paced_s, 2.0, console)
    console.print(figures)


if __name__ == "__main__":
    main()
