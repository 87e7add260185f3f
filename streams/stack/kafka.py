"""The local Apache Kafka broker: one node in KRaft combined mode (broker + controller)."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from streams.errors import StackError
from streams.stack.ports import StackPorts
from streams.stack.processes import ServiceProcess, log_tail


def server_properties(
    data_dir: Path, ports: StackPorts, overrides: Mapping[str, str] | None = None
) -> str:
    """Broker configuration for a single node on loopback, with single-replica internal topics.

    `overrides` replace the value of a key set here (in place) and append the keys not set here;
    a secured broker (SASL listeners, an authorizer) is this configuration plus overrides.
    """
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{ports.controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{ports.kafka},CONTROLLER://127.0.0.1:{ports.controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{ports.kafka}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "default.replication.factor=1",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        # Tests and the demo create many short-lived consumer groups; rebalance at once.
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
    ]
    extra = dict(overrides or {})
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0]
        if key in extra:
            lines[i] = f"{key}={extra.pop(key)}"
    lines.extend(f"{key}={value}" for key, value in extra.items())
    return "\n".join([*lines, ""])


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def format_args(config_file: Path, cluster_id: str, extra: Sequence[str] = ()) -> list[str]:
    """``kafka-storage format`` arguments, then `extra` (e.g. ``--add-scram=...``). The id is
    attached with ``=``: a URL-safe base64 id starts with ``-`` one time in 64, and as a separate
    argument it would parse as an option."""
    return ["format", f"--cluster-id={cluster_id}", f"--config={config_file}", *extra]


class KafkaBroker:
    """Formats (once) and starts the broker under `<stack>/kafka`.

    `overrides` go to `server_properties`, `format_extra` to `kafka-storage format` (a secured
    test broker passes its listeners and ``--add-scram`` users); both default to nothing.
    """

    def __init__(
        self,
        stack_dir: Path,
        ports: StackPorts,
        *,
        overrides: Mapping[str, str] | None = None,
        format_extra: Sequence[str] = (),
    ) -> None:
        self.dir = stack_dir / "kafka"
        self.data_dir = self.dir / "data"
        self.config_file = self.dir / "server.properties"
        self.logs_dir = stack_dir / "logs"
        self.ports = ports
        self.overrides = dict(overrides or {})
        self.format_extra = tuple(format_extra)
        self.process = ServiceProcess("kafka", stack_dir)

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()

    def _java_argv(self, java: str, libs: Path, main: str, *args: str) -> list[str]:
        log4j = resources.files("streams.stack") / "log4j2.xml"
        return [
            java,
            self.process.marker,
            f"-Dkafka.logs.dir={self.logs_dir}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def format_once(self, java: str, libs: Path) -> None:
        """Write the configuration and format the storage directory the first time only."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(server_properties(self.data_dir, self.ports, self.overrides))
        if self.formatted:
            return
        argv = self._java_argv(
            java,
            libs,
            "kafka.tools.StorageTool",
            *format_args(self.config_file, new_cluster_id(), self.format_extra),
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(
                f"formatting Kafka storage in {self.data_dir} failed:\n"
                f"{(result.stdout + result.stderr)[-2000:]}\n"
                f"(delete {self.data_dir} to start from empty storage)"
            )

    def start(self, java: str, libs: Path) -> None:
        argv = self._java_argv(java, libs, "kafka.Kafka", str(self.config_file))
        argv[1:1] = ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
        self.process.start(argv, env={}, cwd=self.dir)

    def log_tail(self) -> str:
        return log_tail(self.logs_dir / "kafka.log")
