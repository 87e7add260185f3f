"""The faust floor: a no-op faust agent over the joiner's source topics, configured as the joiner
is (exactly_once, raw bytes, `JoinerConfig`'s batches and producer linger), that only counts
the records.

`bench/pipeline.py` runs it on the same records as the joiner: its events per CPU-second are
the most any faust-based joiner could reach on this machine (faust's per-record path: fetch,
conductor, stream queue, event, ack, transactions), so the joiner's rate reads against it too.

    python -m bench.faust_floor --app-id ID --broker HOST:PORT --datadir DIR TOPIC [TOPIC ...]

Prints `process: N events` to stderr every 0.2 s, as the joiner's status line does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import faust

from processors.joiner.config import JoinerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--datadir", required=True, help="faust's local folder")
    parser.add_argument(
        "--guarantee", default="exactly_once", choices=("exactly_once", "at_least_once")
    )
    parser.add_argument("topics", nargs="+")
    args = parser.parse_args()
    joiner = JoinerConfig()  # the joiner's own batching and linger, so the floor tracks them
    app = faust.App(
        args.app_id,
        broker=f"kafka://{args.broker}",
        datadir=args.datadir,
        processing_guarantee=args.guarantee,
        web_enabled=False,
        topic_replication_factor=1,
        producer_linger=joiner.producer_linger_s,
    )
    source = app.topic(*args.topics, key_serializer="raw", value_serializer="raw")
    seen = [0]

    @app.agent(source, name="floor")
    async def count(stream: Any) -> None:
        async for events in stream.take_events(joiner.batch_size, joiner.batch_within_s):
            seen[0] += len(events)

    @app.timer(interval=0.2)  # type: ignore[untyped-decorator]  # faust: bare Callable
    async def status() -> None:
        print(f"process: {seen[0]:,} events", file=sys.stderr, flush=True)

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
