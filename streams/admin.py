"""Topics as code: create the declared topics idempotently and report drift from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    ConfigResource,
)  # public in .admin, not re-exported for mypy
from confluent_kafka.cimpl import NewTopic

from streams.errors import TopicError
from streams.topics import TopicSpec

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TopicDrift:
    """One setting of an existing topic that differs from its declaration."""

    topic: str
    setting: str
    declared: str
    actual: str

    def fix(self) -> str:
        if self.setting == "partitions":
            return (
                "partitions cannot be reduced and adding some moves keys between partitions: "
                "recreate the topic (data loss) or migrate it"
            )
        return (
            f"kafka-configs.sh --alter --entity-type topics --entity-name {self.topic} "
            f"--add-config {self.setting}={self.declared}"
        )


@dataclass
class TopicReport:
    """What `ensure` did: topics it created, ones that existed, and drift found."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    drift: list[TopicDrift] = field(default_factory=list)


class TopicAdmin:
    """Creates and checks topics on one cluster through confluent-kafka's AdminClient."""

    def __init__(self, client_config: Mapping[str, str]) -> None:
        # log_level 4 (warning): librdkafka chatters at info level when the client is destroyed.
        self._admin = AdminClient({"log_level": 4, **client_config})

    def existing_partitions(self) -> dict[str, int]:
        """Partition count of every topic on the cluster."""
        try:
            metadata = self._admin.list_topics(timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise TopicError(f"cannot list topics: {exc}; is the broker up?") from exc
        return {name: len(meta.partitions) for name, meta in metadata.topics.items()}

    def ensure(self, specs: Iterable[TopicSpec]) -> TopicReport:
        """Create the missing topics, then report drift of all. Safe to run concurrently.

        Replication factor -1 takes the broker's `default.replication.factor` (1 locally).
        """
        specs = list(specs)
        report = TopicReport()
        present = self.existing_partitions()
        missing = [s for s in specs if s.name not in present]
        if missing:
            futures = self._admin.create_topics(
                [NewTopic(s.name, s.partitions, -1, config=s.configs()) for s in missing],
                request_timeout=TIMEOUT_S,
            )
            for name, future in futures.items():
                try:
                    future.result()
                    report.created.append(name)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise TopicError(f"cannot create topic {name}: {exc}") from exc
                    report.existing.append(name)  # another process won the race
        report.existing.extend(s.name for s in specs if s.name in present)
        report.drift = self.drift(specs)
        return report

    def drift(self, specs: Iterable[TopicSpec]) -> list[TopicDrift]:
        """Settings of existing topics that differ from their specs (missing topics are skipped)."""
        specs = list(specs)
        present = self.existing_partitions()
        found = [s for s in specs if s.name in present]
        drift = [
            TopicDrift(s.name, "partitions", str(s.partitions), str(present[s.name]))
            for s in found
            if present[s.name] != s.partitions
        ]
        if not found:
            return drift
        resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in found]
        futures = self._admin.describe_configs(resources, request_timeout=TIMEOUT_S)
        by_name = {s.name: s for s in found}
        for resource, future in futures.items():
            try:
                actual = future.result()
            except KafkaException as exc:
                raise TopicError(f"cannot describe topic {resource.name}: {exc}") from exc
            for setting, declared in by_name[resource.name].configs().items():
                value = actual[setting].value if setting in actual else None
                if value != declared:
                    drift.append(TopicDrift(resource.name, setting, declared, str(value)))
        return sorted(drift, key=lambda d: (d.topic, d.setting))
