"""Benchmark: SDK events/s to the real broker vs raw confluent-kafka with pre-encoded bytes.

Both sides produce the same simulator events (the fleet's realistic mix of kinds, code text
included) to their topics with the same producer settings (idempotent, acks=all, zstd, linger
20 ms, murmur2). The SDK side also pays for validation, pseudonymisation, redaction and
encoding; the baseline only hands pre-encoded bytes over.
The figure that matters is the ratio, measured in one run (the machine is shared and noisy).

    .venv/bin/python -m bench.produce --events 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.raw_producer import produce_all
from flywheel.clients import codec, telemetry_client
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from schemas.events import Event
from simulator import DEFAULT_CONFIG_PATH, Fleet, build_policy, load_config
from streams.client import ROUTES


def make_events(n: int) -> list[Event]:
    """The first `n` events of the default fleet (seeded: the same events every run)."""
    config = load_config(DEFAULT_CONFIG_PATH)
    fleet = Fleet(config, build_policy(config.policy))
    return list(itertools.islice(fleet.events(n), n))


def raw_baseline(settings: Settings, payloads: list[tuple[str, bytes, bytes]]) -> float:
    config = {
        **settings.kafka_client_config(), "enable.idempotence": True, "acks": "all",
        "compression.type": "zstd", "linger.ms": 20, "partitioner": "murmur2_random",
    }  # fmt: skip
    return len(payloads) / produce_all(config, payloads)


def sdk(settings: Settings, events: list[Event], spool: Path) -> float:
    client = telemetry_client(settings, name="bench", spool_dir=spool)
    start = time.perf_counter()
    for event in events:
        client.send(event)
    if client.flush(120) != 0:
        raise RuntimeError("the SDK did not deliver everything")
    rate = len(events) / (time.perf_counter() - start)
    client.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    console = Console()
    settings = Settings.from_env()
    ensure_infrastructure(settings, lambda _: None)
    events = make_events(args.events)
    c = codec(settings)
    payloads = []
    for event in events:
        topic, key_field = ROUTES[type(event)]
        key = str(getattr(event, key_field)).encode()
        payloads.append((topic, key, c.encode_event(topic, event)))
    table = Table("round", "raw events/s", "SDK events/s", "SDK / raw")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            raw = raw_baseline(settings, payloads)
            ours = sdk(settings, events, Path(tmp) / f"spool-{r}")
            ratios.append(ours / raw)
            table.add_row(str(r + 1), f"{raw:,.0f}", f"{ours:,.0f}", f"{ours / raw:.2f}x")
    console.print(table)
    console.print(f"median SDK/raw ratio: {sorted(ratios)[len(ratios) // 2]:.2f}x (target >= 0.5x)")


if __name__ == "__main__":
    main()
