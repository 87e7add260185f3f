"""Benchmark: SDK events/s to the real broker vs raw confluent-kafka with pre-encoded bytes.

Both sides produce the same simulator events (the fleet's realistic mix of kinds, code text
included) to the same topics with the same producer config (`streams.client.producer_config`:
idempotent, acks=all, zstd, linger 20 ms, murmur2). The SDK side also pays for validation,
pseudonymisation, redaction and encoding; the baseline only hands pre-encoded bytes over.
Each side's clock runs from its first event to the last acknowledgement, after a warm-up
(one event per topic, acknowledged) has connected its producer and got its producer id: cold,
that set-up (~0.5 s) dominated the baseline and made it read 50k or 400k events/s by chance.
Rounds alternate raw and SDK; the figure that matters is the median same-round ratio (the
machine is shared and noisy). `--cold` measures the old way, set-up included.

A second baseline, "encode + raw", encodes each event with the codec inside the timed loop
(what any Avro producer must do at least): the SDK against it shows what validation,
pseudonymisation and redaction cost on top of encoding.

    .venv/bin/python -m bench.produce --events 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.raw_producer import Message, produce_all
from flywheel.clients import codec, telemetry_client
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from schemas.events import Event
from simulator import DEFAULT_CONFIG_PATH, Fleet, build_policy, load_config
from streams.client import ROUTES, producer_config


def make_events(n: int) -> list[Event]:
    """The first `n` events of the default fleet (seeded: the same events every run)."""
    config = load_config(DEFAULT_CONFIG_PATH)
    fleet = Fleet(config, build_policy(config.policy))
    return list(itertools.islice(fleet.events(n), n))


def one_per_topic(events: list[Event]) -> list[int]:
    """Indexes of the first event of each topic: the warm-up set."""
    first: dict[str, int] = {}
    for i, event in enumerate(events):
        first.setdefault(ROUTES[type(event)][0], i)
    return sorted(first.values())


def raw_baseline(
    settings: Settings, payloads: list[Message], warmup: list[Message], *, cold: bool = False
) -> float:
    config = producer_config(settings.kafka_client_config())
    return len(payloads) / produce_all(config, payloads, warmup=() if cold else warmup)


def encode_baseline(
    settings: Settings, events: list[Event], routes: list[tuple[str, bytes]], warmup: list[Message]
) -> float:
    c = codec(settings)
    messages = (
        (topic, key, c.encode_event(topic, event))
        for event, (topic, key) in zip(events, routes, strict=True)
    )
    config = producer_config(settings.kafka_client_config())
    return len(events) / produce_all(config, messages, warmup=warmup)


def sdk(
    settings: Settings, events: list[Event], warmup: list[Event], spool: Path, *, cold: bool = False
) -> float:
    client = telemetry_client(settings, name="bench", spool_dir=spool)
    for event in () if cold else warmup:
        client.send(event)
    if client.flush(60) != 0:
        raise RuntimeError("the SDK did not deliver its warm-up events")
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
    parser.add_argument("--cold", action="store_true", help="include producer set-up (old way)")
    args = parser.parse_args()
    console = Console()
    settings = Settings.from_env()
    ensure_infrastructure(settings, lambda _: None)
    events = make_events(args.events)
    c = codec(settings)
    payloads: list[Message] = []
    for event in events:
        topic, key_field = ROUTES[type(event)]
        key = str(getattr(event, key_field)).encode()
        payloads.append((topic, key, c.encode_event(topic, event)))
    warm = one_per_topic(events)
    routes = [(topic, key) for topic, key, _ in payloads]
    table = Table(
        "round", "raw events/s", "encode + raw events/s", "SDK events/s", "SDK / raw",
        "SDK / (encode + raw)",
    )  # fmt: skip
    ratios, encode_ratios = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            warmup = [payloads[i] for i in warm]
            raw = raw_baseline(settings, payloads, warmup, cold=args.cold)
            encoded = encode_baseline(settings, events, routes, warmup)
            spool = Path(tmp) / f"spool-{r}"
            ours = sdk(settings, events, [events[i] for i in warm], spool, cold=args.cold)
            ratios.append(ours / raw)
            encode_ratios.append(ours / encoded)
            table.add_row(
                str(r + 1), f"{raw:,.0f}", f"{encoded:,.0f}", f"{ours:,.0f}",
                f"{ours / raw:.3f}x", f"{ours / encoded:.3f}x",
            )  # fmt: skip
    console.print(table)
    how = "cold, set-up included" if args.cold else "warm producers"
    console.print(
        f"median SDK/raw ratio ({how}): {statistics.median(ratios):.3f}x (target >= 0.5x); "
        f"SDK/(encode + raw): {statistics.median(encode_ratios):.3f}x"
    )


if __name__ == "__main__":
    main()
