"""`flywheel demo`: the main job. For now, a smoke run of the stack (issue 2).

Later stages turn this into the closed-loop demo of DESIGN §10.
"""

from __future__ import annotations

import time

import click
from rich.table import Table

from flywheel.console import err, out
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from streams.probe import round_trip


@click.command()
def demo() -> None:
    """Bring the stack up, create the topics, round-trip one Avro event, print what happened."""
    settings = Settings.from_env()
    steps = Table("step", "result", "seconds")
    t0 = time.perf_counter()
    with err.status("starting the platform") as status:
        report = ensure_infrastructure(settings, lambda msg: status.update(msg))
        t1 = time.perf_counter()
        where = "local stack" if settings.uses_local_stack else "external cluster"
        steps.add_row("stack up", f"{where}: {settings.kafka_bootstrap}", f"{t1 - t0:.1f}")
        steps.add_row(
            "topics",
            f"{len(report.created)} created, {len(report.existing)} existing, "
            f"{len(report.drift)} drifted",
            "",
        )
        status.update("round-tripping an Avro event")
        probe = round_trip(settings.kafka_client_config(), settings.registry_url)
        t2 = time.perf_counter()
    steps.add_row(
        "avro round trip",
        f"{probe.topic}[{probe.partition}]@{probe.offset}, schema id {probe.schema_id}, "
        f"probe {str(probe.record['probe_id'])[:8]}",
        f"{t2 - t1:.1f}",
    )
    out.print(steps)
    out.print(f"registry: {settings.registry_url}")
    out.print("The closed learning loop joins this demo as the later stages land.")
