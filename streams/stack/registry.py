"""The local schema registry: Apicurio Registry with its storage in Kafka (kafkasql).

Apicurio serves the Confluent Schema Registry API at /apis/ccompat/v7, so every client talks to
it exactly as to Confluent Schema Registry or Karapace in production.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from streams.stack.ports import StackPorts
from streams.stack.processes import ServiceProcess

CCOMPAT_PATH = "/apis/ccompat/v7"
# Confluent Schema Registry's default; Apicurio's is NONE. Subjects may set their own.
DEFAULT_COMPATIBILITY = "BACKWARD"


def registry_environment(ports: StackPorts) -> dict[str, str]:
    """Apicurio configuration (Quarkus reads it from the environment)."""
    return {
        "APICURIO_STORAGE_KIND": "kafkasql",
        "APICURIO_KAFKASQL_BOOTSTRAP_SERVERS": f"127.0.0.1:{ports.kafka}",
        "QUARKUS_HTTP_HOST": "127.0.0.1",
        "QUARKUS_HTTP_PORT": str(ports.registry),
        "QUARKUS_LOG_CONSOLE_FORMAT": "%d{HH:mm:ss,SSS} %-5p [%c{2.}] %s%e%n",
    }


def ccompat_url(ports: StackPorts) -> str:
    return f"http://127.0.0.1:{ports.registry}{CCOMPAT_PATH}"


class SchemaRegistryService:
    """Starts Apicurio under `<stack>/registry` and checks that its Confluent API answers."""

    def __init__(self, stack_dir: Path, ports: StackPorts) -> None:
        self.dir = stack_dir / "registry"
        self.ports = ports
        self.process = ServiceProcess("registry", stack_dir)

    def start(self, java: str, runner_jar: Path) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            java,
            self.process.marker,
            "-Xms64m",
            "-Xmx512m",
            # A small service on a small machine: serial GC and C1 only start it ~2x faster.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-jar",
            str(runner_jar),
        ]
        self.process.start(argv, env=registry_environment(self.ports), cwd=self.dir)

    def answers(self) -> bool:
        """True once a Confluent-API call succeeds (its storage has caught up with Kafka)."""
        try:
            return httpx.get(f"{ccompat_url(self.ports)}/subjects", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def set_default_compatibility(self, level: str = DEFAULT_COMPATIBILITY) -> None:
        # The first write after start can take over 10 s on a loaded 2-core machine (the JVM
        # still warming up, a learner beside it): wait longer, and try again once. Restarted on
        # its existing storage topic, Apicurio answered 409 Conflict to the first write while it
        # was still replaying that topic: try again a few times, a second apart.
        timeouts = conflicts = 0
        while True:
            try:
                response = httpx.put(
                    f"{ccompat_url(self.ports)}/config", json={"compatibility": level}, timeout=30.0
                )
            except httpx.TimeoutException:
                timeouts += 1
                if timeouts > 1:
                    raise
                continue
            if response.status_code == 409 and conflicts < 10:
                conflicts += 1
                time.sleep(1.0)
                continue
            break
        response.raise_for_status()
