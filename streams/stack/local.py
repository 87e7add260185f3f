"""`LocalStack`: up, down and status of the local broker, registry and object store under one
directory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.errors import StackError
from streams.stack import versions
from streams.stack.artifacts import apicurio_app, java_executable, kafka_libs, s3proxy_jar
from streams.stack.kafka import KafkaBroker
from streams.stack.ports import StackPorts
from streams.stack.processes import port_in_use, port_open
from streams.stack.registry import SchemaRegistryService, ccompat_url
from streams.stack.s3 import ObjectStoreService

START_TIMEOUT_S = 180.0
_PORT_VARIABLES = (
    "FLYWHEEL_STACK_KAFKA_PORT / FLYWHEEL_STACK_CONTROLLER_PORT / FLYWHEEL_STACK_REGISTRY_PORT / "
    "FLYWHEEL_STACK_S3_PORT"
)


@dataclass(frozen=True)
class ServiceStatus:
    """One service of the stack as `flywheel stack status` shows it."""

    name: str
    version: str
    pid: int | None
    address: str
    log: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


def _noop(_: str) -> None:
    return None


class LocalStack:
    """The broker, registry and object store under `<home>/stack`: state, logs, pid files and
    artifacts.

    `up` is idempotent and returns once a metadata request, a registry call and an S3 request
    succeed; `down` stops only processes this state directory started; data, schemas and objects
    survive both.
    """

    def __init__(self, home: Path, ports: StackPorts, say: Callable[[str], None] = _noop) -> None:
        self.dir = home / "stack"
        self.artifacts = self.dir / "artifacts"
        self.ports = ports
        self.say = say
        self.kafka = KafkaBroker(self.dir, ports)
        self.registry = SchemaRegistryService(self.dir, ports)
        self.s3 = ObjectStoreService(self.dir, ports)

    def up(self, timeout_s: float = START_TIMEOUT_S) -> list[str]:
        """Start what is not running; returns the names of the services it started."""
        started: list[str] = []
        java = java_executable()
        if self.kafka.process.running_pid() is None:
            self._require_free(self.ports.kafka, self.ports.controller)
            self.say(f"resolving Apache Kafka {versions.KAFKA_VERSION} (Maven)")
            libs = kafka_libs(self.artifacts)
            self.kafka.format_once(java, libs)
            self.say(f"starting Kafka on 127.0.0.1:{self.ports.kafka}")
            self.kafka.start(java, libs)
            started.append("kafka")
        # The object store needs nothing else: it starts while the broker does.
        if self.s3.process.running_pid() is None:
            self._require_free(self.ports.s3)
            self.say(f"resolving S3Proxy {versions.S3PROXY_VERSION} (Maven)")
            jar = s3proxy_jar(self.artifacts)
            self.say(f"starting the object store on {self.s3.endpoint}")
            self.s3.start(java, jar)
            started.append("s3")
        self.kafka.process.wait_until(self._broker_answers, "a metadata request", timeout_s)
        if self.registry.process.running_pid() is None:
            self._require_free(self.ports.registry)
            self.say(f"resolving Apicurio Registry {versions.APICURIO_VERSION} (Maven)")
            jar = apicurio_app(self.artifacts)
            self.say(f"starting the schema registry on 127.0.0.1:{self.ports.registry}")
            self.registry.start(java, jar)
            started.append("registry")
        self.registry.process.wait_until(self.registry.answers, "GET /subjects", timeout_s)
        self.registry.set_default_compatibility()
        self.s3.process.wait_until(self.s3.answers, "GET /", timeout_s)
        return started

    def down(self) -> list[str]:
        """Stop the services this state directory started, in the reverse of the order they
        start (the registry before the broker it stores schemas in); returns their names."""
        stopped = []
        for service in (self.registry.process, self.s3.process, self.kafka.process):
            self.say(f"stopping {service.name}")
            if service.stop():
                stopped.append(service.name)
        return stopped

    def status(self) -> list[ServiceStatus]:
        return [
            ServiceStatus(
                "kafka",
                versions.KAFKA_VERSION,
                self.kafka.process.running_pid(),
                f"127.0.0.1:{self.ports.kafka} (controller :{self.ports.controller})",
                self.kafka.logs_dir / "kafka.log",
            ),
            ServiceStatus(
                "registry",
                versions.APICURIO_VERSION,
                self.registry.process.running_pid(),
                ccompat_url(self.ports),
                self.registry.process.console_log,
            ),
            ServiceStatus(
                "s3",
                versions.S3PROXY_VERSION,
                self.s3.process.running_pid(),
                f"{self.s3.endpoint} (bucket {self.s3.bucket})",
                self.s3.process.console_log,
            ),
        ]

    def _broker_answers(self) -> bool:
        if not port_open(self.ports.kafka):
            return False
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.ports.kafka}", "log_level": 4})
        try:
            return bool(admin.list_topics(timeout=3).brokers)
        except KafkaException:
            return False

    def _require_free(self, *ports: int) -> None:
        for port in ports:
            if port_in_use(port):
                raise StackError(
                    f"port {port} is in use by a process this state directory ({self.dir}) did "
                    f"not start: stop that process, or move the local stack with {_PORT_VARIABLES}"
                )
