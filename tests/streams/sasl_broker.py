"""A second, secured single-node Kafka (KRaft) for security tests: SASL/SCRAM, ACLs enforced.

It reuses the local stack's jars and launch code (`KafkaBroker` with overrides) in a temporary
directory on free loopback ports, beside the normal stack, which keeps serving the registry.
Clients use the SASL_PLAINTEXT listener (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN); the broker
authenticates to itself there as `admin` (SCRAM-SHA-512). The controller listener stays
PLAINTEXT on loopback; its (anonymous) principal is a super user because the broker registers
and heartbeats through it. Every other principal needs ACLs: no ACL means no access.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from flywheel.listen import free_port
from flywheel.settings import Settings
from streams.stack.artifacts import java_executable, kafka_libs
from streams.stack.kafka import KafkaBroker
from streams.stack.local import LocalStack
from streams.stack.ports import StackPorts

ADMIN = "admin"
USERS = ("admin", "flywheel-svc", "reader")
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
START_TIMEOUT_S = 90.0
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class SaslBroker:
    """A running secured broker: where it listens and each user's (random) password."""

    bootstrap: str
    passwords: Mapping[str, str]
    log_dir: Path

    def client_config(self, user: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
        """librdkafka settings for `user` (its real password) over `mechanism`."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": self.passwords[user],
        }

    def env(self, user: str, registry_url: str, **overrides: str) -> dict[str, str]:
        """FLYWHEEL_* variables for `user`; `overrides` replace FLYWHEEL_KAFKA_<NAME> values
        (e.g. ``SASL_PASSWORD="wrong"``)."""
        kafka = {
            "SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "SASL_MECHANISM": "SCRAM-SHA-256",
            "SASL_USERNAME": user,
            "SASL_PASSWORD": self.passwords[user],
            **overrides,
        }
        return {
            "FLYWHEEL_BOOTSTRAP_SERVERS": self.bootstrap,
            "FLYWHEEL_SCHEMA_REGISTRY_URL": registry_url,
            **{f"FLYWHEEL_KAFKA_{name}": value for name, value in kafka.items()},
        }


def broker_overrides(ports: StackPorts, passwords: Mapping[str, str]) -> dict[str, str]:
    """`server.properties` overrides that secure the local stack's single-node configuration."""
    admin_login = f'username="{ADMIN}" password="{passwords[ADMIN]}"'
    plain_users = " ".join(f'user_{user}="{pw}"' for user, pw in passwords.items())
    listener = "listener.name.sasl_plaintext"
    return {
        "listeners": (
            f"SASL_PLAINTEXT://127.0.0.1:{ports.kafka},CONTROLLER://127.0.0.1:{ports.controller}"
        ),
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{ports.kafka}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        f"{listener}.scram-sha-256.sasl.jaas.config": f"{_SCRAM_MODULE} required {admin_login};",
        f"{listener}.scram-sha-512.sasl.jaas.config": f"{_SCRAM_MODULE} required {admin_login};",
        f"{listener}.plain.sasl.jaas.config": (
            f"{_PLAIN_MODULE} required {admin_login} {plain_users};"
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }


def scram_format_args(passwords: Mapping[str, str]) -> list[str]:
    """`kafka-storage format --add-scram` arguments: every user under both SCRAM mechanisms,
    written into the bootstrap metadata so they exist before the broker first starts."""
    return [
        f"--add-scram={mechanism}=[name={user},password={password}]"
        for user, password in passwords.items()
        for mechanism in SCRAM
    ]


@contextmanager
def running_sasl_broker(
    directory: Path, timeout_s: float = START_TIMEOUT_S
) -> Iterator[SaslBroker]:
    """Format and start a secured broker under `directory`; stop it (SIGKILL after 5 s) on exit.

    Raises StackError (with the broker's log tail) if it does not answer an authenticated
    metadata request within `timeout_s`.
    """
    ports = StackPorts(kafka=free_port(), controller=free_port(), registry=free_port())
    passwords = {user: f"pw-{user}-{secrets.token_hex(12)}" for user in USERS}
    broker = KafkaBroker(
        directory,
        ports,
        overrides=broker_overrides(ports, passwords),
        format_extra=scram_format_args(passwords),
    )
    java = java_executable()
    settings = Settings.from_env()
    libs = kafka_libs(LocalStack(settings.home, settings.ports).artifacts)
    broker.format_once(java, libs)
    running = SaslBroker(f"127.0.0.1:{ports.kafka}", passwords, broker.logs_dir)
    broker.start(java, libs)
    try:
        broker.process.wait_until(
            lambda: _answers(running.client_config(ADMIN)), "an authenticated metadata request",
            timeout_s,
        )  # fmt: skip
        yield running
    finally:
        broker.process.stop(timeout_s=5.0)


def _answers(config: Mapping[str, str]) -> bool:
    admin = AdminClient({**config, "log_level": 0})
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except KafkaException:
        return False
