"""The soak benchmark's load: one simulated fleet through the SDK, phase after phase.

    .venv/bin/python -m bench.soak_load --phases '[["base", 50, 250], ["burst", 50, 500]]'

What `flywheel simulate --rate R --duration D` does, but one fleet runs every phase: the rate
changes without a restart gap, sessions continue and event time stays in order across phases
(consecutive `simulate` processes would each start a new fleet and clock, flush their pending
future events in a lump and pause for start-up at every phase change). The fleet's clock starts
after the newest offer already in Kafka, like the demo's, so no event is judged late.

Prints ``{"started": true}`` on stdout when the first phase begins, then one JSON line a
second: ``{"phase": name, "requests": n, "events": n}``
(cumulative since the start), then ``{"done": true, ...}`` after the client's final flush.
"""

from __future__ import annotations

import argparse
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from bench.soak_stats import parse_phases
from flywheel.clients import codec, telemetry_client
from flywheel.demo.loop import FLEET_START_MARGIN, fleet_start_time, newest_event_time
from flywheel.settings import Settings
from simulator import (
    DEFAULT_CONFIG_PATH,
    Fleet,
    RunReport,
    build_policy,
    config_with_overrides,
    load_config,
    run_fleet,
)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--phases", required=True, help="JSON [[name, duration_s, rate], ...]")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    phases = parse_phases(args.phases)
    settings = Settings.from_env()
    newest = newest_event_time(
        settings.kafka_client_config(), codec(settings), "telemetry.suggestions"
    )
    overrides: dict[str, object] = {
        "sessions.start_time": fleet_start_time(
            newest, datetime.now(UTC), FLEET_START_MARGIN
        ).isoformat(),
        "fleet_id": f"soak-{uuid.uuid4().hex[:8]}",
    }
    if args.seed is not None:
        overrides["seed"] = args.seed
    config = config_with_overrides(load_config(args.config), overrides)
    fleet = Fleet(config, build_policy(config.policy))
    requests = events = 0  # of the finished phases
    with telemetry_client(settings, name="soak-load") as client:
        emit(started=True)  # the soak's clock starts here
        for name, duration_s, rate in phases:

            def progress(
                report: RunReport, name: str = name, before: tuple[int, int] = (requests, events)
            ) -> None:
                emit(phase=name, requests=before[0] + report.requests,
                     events=before[1] + report.events)  # fmt: skip

            report = run_fleet(
                fleet, client, duration_s=duration_s, rate_per_s=rate, progress=progress,
                flush=False,
            )  # fmt: skip
            requests, events = requests + report.requests, events + report.events
            emit(phase=name, requests=requests, events=events)
        client.flush(60)
        stats = client.stats
        emit(done=True, requests=requests, events=events, acked=stats.acked,
             spooled=stats.spooled, failed=stats.failed)  # fmt: skip


if __name__ == "__main__":
    main()
