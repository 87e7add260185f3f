"""Soak: the full pipeline under a steady load with a burst; consumer lag and worker memory.

The simulator (`bench/soak_load.py`: one fleet through the SDK) sends requests at `--rate`
for a warm-up, at `--burst-factor` x that rate for the burst, then at `--rate` again until
`--duration`. The joiner (`flywheel process`), the lake sink (`flywheel sink`) and the feature
processor (`flywheel features run`) run as subprocesses, started the way the demo starts them.
Every `--sample-s` the soak reads the joiner's and the sink's consumer lag per topic, the RSS
and CPU of each worker's process tree (/proc) and the events/s produced. Targets: the lag is
bounded at the base rate and drains after the burst; each worker's memory is flat.

By default it starts its OWN local stack (Kafka + registry) under a temporary FLYWHEEL_HOME on
other ports (29092/29093/28081), so the dev stack and its data are left alone, and stops it at
the end, on Ctrl-C and on errors. `--external` uses the configured stack instead (the workers
then use the platform's consumer groups, like an operator's deployment would).

    .venv/bin/python -m bench.soak                   # 5 min, base 250 req/s, burst 2x
    .venv/bin/python -m bench.soak --duration 150 --warmup-s 45 --burst-s 25

Results: `reports/soak/<run>/results.json`, `soak.png`, worker logs in `logs/`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console

from bench.procfs import process_children, tree_usage
from bench.soak_report import Sample, plot, print_summary, summarize, write_results
from bench.soak_stats import Phase, SoakError, phase_at, schedule
from flywheel.demo.loop import JOINER_LATENESS_S, SINK_GROUP
from flywheel.demo.workers import Workers, WorkerSpec
from flywheel.settings import Settings
from simulator import DEFAULT_CONFIG_PATH
from streams.client import CLIENT_TOPICS
from streams.lag import LagProbe

ROOT = Path(__file__).resolve().parents[1]
JOINER_GROUP = "flywheel.joiner"  # `flywheel process`'s default --group
LAG_GROUPS = {  # label -> (consumer group, its topics); the feature processor never commits
    "joiner": (JOINER_GROUP, CLIENT_TOPICS),
    "sink": (SINK_GROUP, (*CLIENT_TOPICS, "rewards", "features.updates")),
}
WORKER_SPECS = (  # the demo's joiner, sink and feature processor (flywheel/demo/loop.py)
    WorkerSpec("joiner", ["process", "--status-every", "10s",
                          "--allowed-lateness", f"{JOINER_LATENESS_S}s"]),
    WorkerSpec("sink", ["sink", "--max-age", "2s", "--status-every", "10s"]),
    WorkerSpec("features", ["features", "run", "--status-every", "10s"]),
)  # fmt: skip
# Memory is judged for the workers whose state must stay flat under a steady load. Shown, not
# judged: the feature processor, whose windows fill for 24 h (~28 bytes per entity and event
# time, bounded by the longest window: docs/operations.md), and the load generator itself.
JUDGED = ("joiner", "sink")


class _Stop(Exception):
    """SIGTERM: unwind like Ctrl-C so the workers and the stack are stopped."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop("SIGTERM")


# --- the stack ------------------------------------------------------------------------------


def _flywheel(args: list[str], log: Path) -> None:
    with log.open("ab") as out:
        code = subprocess.call([sys.executable, "-m", "flywheel", *args], stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SoakError(f"`flywheel {' '.join(args)}` exited with {code}; its log ({log}):\n{tail}")


@contextmanager
def own_stack(
    ports: tuple[int, int, int], log: Path, keep: bool, console: Console
) -> Iterator[Path]:
    """A local stack under a temporary FLYWHEEL_HOME on ``ports`` (kafka, controller, registry),
    set in this process's environment (the workers inherit it); stopped and removed on exit."""
    artifacts = Settings.from_env().home / "stack" / "artifacts"
    home = Path(tempfile.mkdtemp(prefix="flywheel-soak-"))
    if artifacts.is_dir():  # the pinned jars, read-only: spares a Maven resolution
        (home / "stack").mkdir()
        (home / "stack" / "artifacts").symlink_to(artifacts)
    for key in ("FLYWHEEL_BOOTSTRAP_SERVERS", "FLYWHEEL_SCHEMA_REGISTRY_URL", "FLYWHEEL_LAKE"):
        os.environ.pop(key, None)
    names = ("KAFKA", "CONTROLLER", "REGISTRY")
    os.environ.update(
        {f"FLYWHEEL_STACK_{n}_PORT": str(p) for n, p in zip(names, ports, strict=True)}
    )
    os.environ["FLYWHEEL_HOME"] = str(home)
    stopped = False
    try:
        with console.status(f"starting a stack on ports {ports} under {home}"):
            _flywheel(["stack", "up"], log)
        yield home
    finally:
        with console.status("stopping the soak's stack"):
            try:
                _flywheel(["stack", "down"], log)
                stopped = True
            except SoakError as exc:
                console.print(f"[red]{exc}")
        if stopped and not keep:
            shutil.rmtree(home, ignore_errors=True)
        else:
            console.print(f"the soak's FLYWHEEL_HOME is kept: {home}")


# --- the load -------------------------------------------------------------------------------


class Load:
    """`python -m bench.soak_load` for ``phases``; its progress lines read in a thread."""

    def __init__(self, phases: list[Phase], config: Path, seed: int | None, log: Path) -> None:
        triples = [[p.name, p.duration_s, p.rate_per_s] for p in phases]
        args = ["--phases", json.dumps(triples), "--config", str(config)]
        args += [] if seed is None else ["--seed", str(seed)]
        self._log: IO[bytes] = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.soak_load", *args], cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stderr=self._log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.started_at: float | None = None  # monotonic
        self.events = 0
        self.last: dict[str, object] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        if self.proc.stdout is None:
            return
        for raw in self.proc.stdout:
            line = json.loads(raw)
            if line.get("started"):
                self.started_at = time.monotonic()
            self.events = int(line.get("events", self.events))
            self.last = line

    def check(self) -> None:
        code = self.proc.poll()
        if code not in (None, 0):
            raise SoakError(f"the load exited with {code}; see {self._log.name}")

    @property
    def done(self) -> bool:
        return bool(self.last.get("done"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --- the run --------------------------------------------------------------------------------


def wait_ready(kafka: dict[str, str], workers: Workers, timeout_s: float) -> None:
    """Until the joiner's and the sink's groups are stable with members (a load started before
    would count their start-up as lag); raises SoakError after ``timeout_s`` or if one dies."""
    config: dict[str, str | int | float | bool] = {**kafka}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        workers.check()
        try:
            found = admin.describe_consumer_groups([g for g, _ in LAG_GROUPS.values()])
            groups = [f.result(timeout=5) for f in found.values()]
        except KafkaException:
            groups = []
        if groups and all(g.state == ConsumerGroupState.STABLE and g.members for g in groups):
            return
        time.sleep(1)
    raise SoakError(f"the joiner and sink groups did not join within {timeout_s:g} s; see logs")


class Sampler:
    """One :class:`Sample` per call: lag per group and topic, each worker's memory and CPU."""

    def __init__(self, kafka: dict[str, str], pids: dict[str, int]) -> None:
        self.probe = LagProbe(kafka)
        self.pids = pids
        self._prev: dict[str, float] = {}  # worker -> CPU seconds at the previous sample
        self._prev_at = time.monotonic()
        self._prev_events = 0

    def take(self, t: float, phase: str, events: int) -> Sample:
        now = time.monotonic()
        elapsed = max(now - self._prev_at, 1e-6)
        sample = Sample(t, phase, (events - self._prev_events) / elapsed)
        for label, (group, topics) in LAG_GROUPS.items():
            sample.lag[label] = {topic: self.probe.lag(group, [topic]) for topic in topics}
        kids = process_children()
        for name, pid in self.pids.items():
            usage = tree_usage(pid, kids)
            sample.rss_mib[name] = None if usage is None else round(usage[0], 2)
            if usage is not None and name in self._prev:
                sample.cpu_pct[name] = round((usage[1] - self._prev[name]) / elapsed * 100, 1)
            if usage is not None:
                self._prev[name] = usage[1]
        self._prev_at, self._prev_events = now, events
        return sample


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def status_line(s: Sample) -> str:
    lags = " ".join(f"{g} {_n(s.total_lag(g))}" for g in LAG_GROUPS)
    rss = " ".join(f"{w} {m:.0f}" for w, m in s.rss_mib.items() if m is not None)
    cpu = " ".join(f"{w} {c:.0f}%" for w, c in s.cpu_pct.items() if c is not None)
    head = f"t={s.t:5.0f}s {s.phase:8} {s.events_per_s:7,.0f} ev/s"
    return f"{head} | lag {lags} | MiB {rss} | CPU {cpu}"


def soak(
    args: argparse.Namespace, phases: list[Phase], run_dir: Path, console: Console,
    samples: list[Sample],
) -> None:  # fmt: skip
    """Start the workers and the load and append a sample to ``samples`` every ``sample_s``
    until the load is done; workers and load are stopped however this ends (Ctrl-C, a dead
    worker), and the samples taken so far stay in ``samples``."""
    kafka = Settings.from_env().kafka_client_config()
    workers = Workers(run_dir / "logs")
    load: Load | None = None
    sampler: Sampler | None = None
    try:
        for spec in WORKER_SPECS:
            workers.start(spec)
        with console.status("waiting for the joiner and sink to join their groups"):
            wait_ready(kafka, workers, args.ready_timeout_s)
        load = Load(phases, args.config, args.seed, run_dir / "logs" / "load.log")
        pids = workers.pids()
        sampler = Sampler(kafka, {**pids, "load": load.proc.pid})
        end_by = time.monotonic() + phases[-1].end_s + 120  # start-up and final flush
        last_print = 0.0
        with console.status("starting the load") as status:
            while not load.done and time.monotonic() < end_by:
                time.sleep(args.sample_s)
                workers.check()
                load.check()
                if load.started_at is None:
                    continue
                t = time.monotonic() - load.started_at
                if t > phases[-1].end_s:
                    continue  # the load's final flush: no longer the schedule's rate
                sample = sampler.take(round(t, 2), phase_at(phases, t), load.events)
                samples.append(sample)
                status.update(status_line(sample))
                if not console.is_terminal and time.monotonic() - last_print >= 10:
                    last_print = time.monotonic()
                    print(status_line(sample), flush=True)
        if not load.done:
            raise SoakError(f"the load did not finish in time; see {run_dir / 'logs' / 'load.log'}")
    finally:
        if load is not None:
            load.stop()
        codes = workers.stop()
        if sampler is not None:
            sampler.probe.close()
        console.print(f"workers stopped (exit codes): {codes}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--duration", type=float, default=300.0, help="seconds of load in all")
    p.add_argument(
        "--rate", type=float, default=250.0, help="base rate, requests/s (~2.3 events each)"
    )
    p.add_argument("--burst-factor", type=float, default=2.0)
    p.add_argument("--warmup-s", type=float, help="base-rate warm-up; default duration/6")
    p.add_argument("--burst-s", type=float, help="burst length; default duration/6")
    p.add_argument(
        "--settle-s", type=float, default=15.0, help="warm-up start left out of the base lag"
    )
    p.add_argument("--sample-s", type=float, default=2.0)
    p.add_argument(
        "--lag-tolerance", type=float, default=0.25, help="drained: lag ≤ base max x (1 + this)"
    )
    p.add_argument(
        "--max-slope",
        type=float,
        default=2.0,
        help="memory flat: RSS slope (last 2/3) ≤ this MiB/min",
    )
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help="simulator config")
    p.add_argument("--seed", type=int)
    p.add_argument("--external", action="store_true", help="use the configured stack, start none")
    p.add_argument("--kafka-port", type=int, default=29092)
    p.add_argument("--controller-port", type=int, default=29093)
    p.add_argument("--registry-port", type=int, default=28081)
    p.add_argument("--keep-home", action="store_true", help="keep the soak stack's FLYWHEEL_HOME")
    p.add_argument("--ready-timeout-s", type=float, default=180.0)
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "soak")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    console = Console()
    phases = schedule(args.duration, args.rate, args.burst_factor, args.warmup_s, args.burst_s)
    run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = args.out / run_id
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    samples: list[Sample] = []
    error: BaseException | None = None
    ports = (args.kafka_port, args.controller_port, args.registry_port)
    try:
        if args.external:
            soak(args, phases, run_dir, console, samples)
        else:
            with own_stack(ports, run_dir / "logs" / "stack.log", args.keep_home, console):
                soak(args, phases, run_dir, console, samples)
    except (KeyboardInterrupt, Exception) as exc:  # report what was sampled, then exit 1
        error = exc
        console.print(f"[red]soak stopped early: {type(exc).__name__}: {exc}")
    report(args, phases, run_dir, console, samples, error)
    sys.exit(0 if error is None else 1)


def report(
    args: argparse.Namespace, phases: list[Phase], run_dir: Path, console: Console,
    samples: list[Sample], error: BaseException | None,
) -> None:  # fmt: skip
    """Summary table and verdicts, results.json and the plot of whatever was sampled."""
    summary = None
    if error is not None:
        console.print("[yellow]partial run: the figures and verdicts cover only what was sampled")
    try:
        summary = summarize(
            samples, phases, args.settle_s, args.lag_tolerance, args.max_slope, JUDGED
        )
        print_summary(console, summary)
    except SoakError as exc:
        console.print(f"[yellow]no summary: {exc}")
    meta = {
        "run_id": run_dir.name, "stack": "external" if args.external else "own",
        "rate_per_s": args.rate, "burst_factor": args.burst_factor, "duration_s": args.duration,
        "settle_s": args.settle_s, "sample_s": args.sample_s, "config": str(args.config),
        "cpus": os.cpu_count(), "error": None if error is None else repr(error),
    }  # fmt: skip
    write_results(run_dir / "results.json", meta, phases, summary, samples)
    console.print(f"results: {run_dir / 'results.json'}")
    if samples:
        plot(run_dir / "soak.png", samples, phases)
        console.print(f"plot:    {run_dir / 'soak.png'}")
    console.print(f"logs:    {run_dir / 'logs'}")


if __name__ == "__main__":
    main()
