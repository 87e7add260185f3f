"""The model registry: versions' histories on ``models.versions``, channel pointers on
``models.channels`` (DESIGN §3, §4, §8).

Kafka is the registry: ``models.versions`` is the append-only history (one ModelVersionEvent per
step of a version's life, keyed by model name) and ``models.channels`` is compacted, keyed
``<model>:<channel>``, so its latest record per key is where each channel points. Writes are
synchronous (flushed and their delivery checked); reads are bounded: from the beginning to the
end offsets taken when the read starts, so a write acknowledged before a read is seen by it.

Version 0 is the simulator's heuristic policy: it has no artifact and is never registered, so a
model with no production pointer serves version 0. Registered versions start at 1. The registry
assumes one writer per model at a time (the learner, or an operator's CLI): ``next_version`` reads
the history, it does not reserve a number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from model_registry.artifacts import ArtifactRef
from model_registry.errors import ModelRegistryError
from policies.policy import FALLBACK_VERSION as FALLBACK_VERSION  # v0, never registered
from schemas.enums import Channel, ModelEventType
from schemas.events import ChannelPointer, ModelVersionEvent, TrainingWindow
from schemas.records import new_event_id, now_ms
from streams.errors import TopicIOError
from streams.serde import AvroCodec
from streams.topic_io import EventProducer, KeyedValue, default_producer_id, read_to_end
from streams.topics import (
    MODEL_ACKS_TOPIC,
    MODEL_CHANNELS_TOPIC,
    MODEL_VERSIONS_TOPIC,
    TopicSpec,
    topic,
)

NO_WINDOW = TrainingWindow(mds_dataset="", mds_windows=(), lake_ranges=())


# A version's decision is final once it reached one of these; REGISTERED, GATE_PASSED and
# CANARY_STARTED are steps in flight.
DECIDED = frozenset(
    {ModelEventType.PROMOTED, ModelEventType.GATE_FAILED, ModelEventType.ROLLED_BACK}
)


@dataclass(frozen=True)
class ModelTopics:
    """The topics the registry and the serving fleet use; tests point them at their own.

    Records are always encoded with the schema of the contract topic (``models.*``), whatever
    topic they are written to.
    """

    versions: str = MODEL_VERSIONS_TOPIC
    channels: str = MODEL_CHANNELS_TOPIC
    acks: str = MODEL_ACKS_TOPIC

    @classmethod
    def prefixed(cls, prefix: str) -> ModelTopics:
        """A private copy: ``<prefix>.versions``, ``<prefix>.channels``, ``<prefix>.acks``."""
        return cls(f"{prefix}.versions", f"{prefix}.channels", f"{prefix}.acks")

    def specs(self) -> list[TopicSpec]:
        """The contract topics' declarations (partitions, cleanup, retention) under these names,
        to create them (`streams.admin.TopicAdmin.ensure`)."""
        pairs = ((MODEL_VERSIONS_TOPIC, self.versions), (MODEL_CHANNELS_TOPIC, self.channels),
                 (MODEL_ACKS_TOPIC, self.acks))  # fmt: skip
        return [dataclasses.replace(topic(contract), name=name) for contract, name in pairs]


DEFAULT_TOPICS = ModelTopics()


def channel_key(model_name: str, channel: Channel) -> str:
    """The ``models.channels`` record key: ``<model_name>:<channel in lower case>``."""
    return f"{model_name}:{channel.value.lower()}"


@dataclass(frozen=True)
class VersionState:
    """One version's facts and latest state, folded from its events in log order."""

    model_name: str
    version: int
    parent_version: int | None
    status: ModelEventType  # the latest event's type
    artifact: ArtifactRef
    registered_at: datetime
    updated_at: datetime
    latest: ModelVersionEvent  # the latest event: metrics, off-policy estimates, reason
    events: tuple[ModelVersionEvent, ...]


def fold_versions(events: list[ModelVersionEvent]) -> dict[int, VersionState]:
    """Latest state per version of one model's events (in log order), by version."""
    by_version: dict[int, list[ModelVersionEvent]] = {}
    for event in events:
        by_version.setdefault(event.version, []).append(event)
    return {
        version: VersionState(
            model_name=steps[0].model_name,
            version=version,
            parent_version=steps[0].parent_version,
            status=steps[-1].event_type,
            artifact=ArtifactRef(steps[-1].artifact_uri, steps[-1].artifact_sha256),
            registered_at=steps[0].event_time,
            updated_at=steps[-1].event_time,
            latest=steps[-1],
            events=tuple(steps),
        )
        for version, steps in sorted(by_version.items())
    }


class ModelRegistry:
    """Registers model versions, records their steps and points channels at them.

    ``kafka_config`` is a confluent-kafka client configuration (``Settings.kafka_client_config()``)
    and ``codec`` the platform's Avro codec. Every write returns once the broker acknowledged it
    and raises ModelRegistryError otherwise. Not thread-safe: use one per thread.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        codec: AvroCodec,
        *,
        producer: str | None = None,
        topics: ModelTopics = DEFAULT_TOPICS,
        timeout_s: float = 30.0,
    ) -> None:
        self._kafka_config = dict(kafka_config)
        self._codec = codec
        self._producer_id = producer or default_producer_id("model_registry.registry")
        self.topics = topics
        self._timeout_s = timeout_s
        self._out = EventProducer(kafka_config, timeout_s=timeout_s)

    # Reading -----------------------------------------------------------------------------

    def history(self, model_name: str) -> list[ModelVersionEvent]:
        """Every event of ``model_name``, in log order, deduplicated by ``event_id``."""
        key = model_name.encode()
        records = self._read(self.topics.versions, key.__eq__)
        seen: set[str] = set()
        events: list[ModelVersionEvent] = []
        for _, value in records:
            if value is None:
                continue
            event = ModelVersionEvent.from_record(self._codec.decode(MODEL_VERSIONS_TOPIC, value))
            if event.event_id not in seen:
                seen.add(event.event_id)
                events.append(event)
        return events

    def model_names(self) -> list[str]:
        """Every model with a registered version, sorted by name."""
        records = self._read(self.topics.versions, lambda key: key is not None)
        return sorted({key.decode() for key, _ in records if key is not None})

    def latest_model(self) -> str | None:
        """The model whose newest version was registered last (None: no versions at all), in
        one read of the versions topic."""
        records = self._read(self.topics.versions, lambda key: key is not None)
        latest: tuple[datetime, str] | None = None
        for _, value in records:
            if value is None:
                continue
            event = ModelVersionEvent.from_record(self._codec.decode(MODEL_VERSIONS_TOPIC, value))
            if event.event_type is ModelEventType.REGISTERED and (
                latest is None or event.event_time >= latest[0]
            ):
                latest = (event.event_time, event.model_name)
        return None if latest is None else latest[1]

    def versions(self, model_name: str) -> dict[int, VersionState]:
        """The latest state of each registered version of ``model_name``, by version."""
        return fold_versions(self.history(model_name))

    def version(self, model_name: str, version: int) -> VersionState:
        """One version's state; ModelRegistryError naming the known versions if it is unknown."""
        return _known(self.versions(model_name), model_name, version)

    def next_version(self, model_name: str) -> int:
        """One more than the highest version in the history; 1 for a new model."""
        return max((e.version for e in self.history(model_name)), default=0) + 1

    def channels(self, model_name: str) -> dict[Channel, ChannelPointer]:
        """Where each channel of ``model_name`` points now; absent channels point nowhere."""
        prefix = f"{model_name}:".encode()
        records = self._read(
            self.topics.channels, lambda key: key is not None and key.startswith(prefix)
        )
        pointers: dict[Channel, ChannelPointer] = {}
        by_key = {channel_key(model_name, c).encode(): c for c in Channel}
        for key, value in records:
            channel = by_key.get(key or b"")
            if channel is None:
                continue
            if value is None:
                pointers.pop(channel, None)  # tombstone: the channel was cleared
            else:
                decoded = self._codec.decode(MODEL_CHANNELS_TOPIC, value)
                pointers[channel] = ChannelPointer.from_record(decoded)
        return pointers

    # Writing -----------------------------------------------------------------------------

    def register(
        self,
        model_name: str,
        artifact: ArtifactRef,
        *,
        parent_version: int | None,
        reward_fn: str,
        training_window: TrainingWindow = NO_WINDOW,
        metrics: Mapping[str, float] | None = None,
        version: int | None = None,
        reason: str | None = None,
    ) -> ModelVersionEvent:
        """Emit REGISTERED for a new version (``next_version`` unless given) and point the
        candidate channel at it. ModelRegistryError if ``version`` is already registered."""
        versions = self.versions(model_name)
        number = version if version is not None else max(versions, default=0) + 1
        if number in versions or number < 1:
            raise ModelRegistryError(
                f"{model_name} version {number} is already registered or below 1; register "
                f"under the next version, {max(versions, default=0) + 1}"
            )
        event = ModelVersionEvent(
            producer=self._producer_id,
            model_name=model_name,
            version=number,
            parent_version=parent_version,
            event_type=ModelEventType.REGISTERED,
            artifact_uri=artifact.uri,
            artifact_sha256=artifact.sha256,
            training_window=training_window,
            reward_fn=reward_fn,
            metrics=dict(metrics or {}),
            reason=reason,
        )
        self._emit(event)
        self._point(event, Channel.CANDIDATE, 0.0)
        self._flush()
        return event

    def record_step(
        self,
        model_name: str,
        version: int,
        event_type: ModelEventType,
        *,
        reason: str | None = None,
        **changes: Any,
    ) -> ModelVersionEvent:
        """Emit ``event_type`` for a registered version, repeating its facts from its latest
        event; ``changes`` sets other fields (``metrics``, the off-policy check's ``ope_*``)."""
        state = self.version(model_name, version)
        event = self._step(state, event_type, reason, **changes)
        self._emit(event)
        self._flush()
        return event

    def start_canary(
        self, model_name: str, version: int, traffic_fraction: float, *, reason: str | None = None
    ) -> ChannelPointer:
        """Emit CANARY_STARTED and route ``traffic_fraction`` (in (0, 1]) of users to it."""
        if not 0.0 < traffic_fraction <= 1.0:
            raise ModelRegistryError(
                f"canary traffic fraction {traffic_fraction} is outside (0, 1]; e.g. 0.1 routes "
                "10% of users to the canary"
            )
        event = self._step(self.version(model_name, version), ModelEventType.CANARY_STARTED, reason)
        self._emit(event)
        pointer = self._point(event, Channel.CANARY, traffic_fraction)
        self._flush()
        return pointer

    def promote(
        self, model_name: str, version: int, *, reason: str | None = None
    ) -> ChannelPointer:
        """Emit PROMOTED, point production at ``version`` and clear the canary channel."""
        event = self._step(self.version(model_name, version), ModelEventType.PROMOTED, reason)
        self._emit(event)
        pointer = self._point(event, Channel.PRODUCTION, 1.0)
        self._clear(model_name, Channel.CANARY)
        self._flush()
        return pointer

    def rollback(
        self, model_name: str, *, reason: str | None = None, to_fallback: bool = False
    ) -> ChannelPointer | None:
        """Emit ROLLED_BACK for the production version and point production at its parent.

        With ``to_fallback``, a version with no registered parent is rolled back to the
        fallback (version 0: the production channel is cleared) and None is returned.
        ModelRegistryError when nothing is in production or there is no parent to return to.
        """
        production = self.channels(model_name).get(Channel.PRODUCTION)
        if production is None:
            raise ModelRegistryError(
                f"{model_name} has no production version to roll back: it serves the fallback "
                f"(version {FALLBACK_VERSION}); promote a version with `flywheel models promote`"
            )
        versions = self.versions(model_name)
        current = _known(versions, model_name, production.version)
        parent = current.parent_version
        if (parent is None or parent not in versions) and not to_fallback:
            raise ModelRegistryError(
                f"{model_name} version {current.version} has no registered parent to roll back "
                f"to; promote another version (`flywheel models promote <version>`) or return "
                f"to the fallback v{FALLBACK_VERSION} (`flywheel models rollback --to-fallback`)"
            )
        why = reason or "rolled back by an operator"
        self._emit(self._step(current, ModelEventType.ROLLED_BACK, why))
        if parent is None or parent not in versions:
            self._clear(model_name, Channel.PRODUCTION)
            self._flush()
            return None
        pointer = self._point(versions[parent].latest, Channel.PRODUCTION, 1.0)
        self._flush()
        return pointer

    def stop_canary(self, model_name: str, *, reason: str | None = None) -> int:
        """Emit ROLLED_BACK for the canary version and clear the canary; returns its version."""
        canary = self.channels(model_name).get(Channel.CANARY)
        if canary is None:
            raise ModelRegistryError(
                f"{model_name} has no canary to stop; see `flywheel models list`"
            )
        state = self.version(model_name, canary.version)
        self._emit(self._step(state, ModelEventType.ROLLED_BACK, reason or "canary stopped"))
        self._clear(model_name, Channel.CANARY)
        self._flush()
        return canary.version

    def _step(
        self, state: VersionState, event_type: ModelEventType, reason: str | None, **changes: Any
    ) -> ModelVersionEvent:
        return dataclasses.replace(
            state.latest,
            event_id=new_event_id(),
            event_time=now_ms(),
            producer=self._producer_id,
            event_type=event_type,
            reason=reason,
            **changes,
        )

    def _read(self, topic: str, keep: Callable[[bytes | None], bool]) -> list[KeyedValue]:
        try:
            return read_to_end(self._kafka_config, topic, keep=keep, timeout_s=self._timeout_s)
        except TopicIOError as exc:
            raise ModelRegistryError(str(exc)) from exc

    def _flush(self) -> None:
        try:
            self._out.flush()
        except TopicIOError as exc:
            raise ModelRegistryError(
                f"{exc} (the registry writes {self.topics.versions} and {self.topics.channels})"
            ) from exc

    def _emit(self, event: ModelVersionEvent) -> None:
        value = self._codec.encode_event(MODEL_VERSIONS_TOPIC, event)
        self._out.send(self.topics.versions, event.model_name, value)

    def _point(
        self, event: ModelVersionEvent, channel: Channel, traffic_fraction: float
    ) -> ChannelPointer:
        pointer = ChannelPointer(
            producer=self._producer_id,
            model_name=event.model_name,
            channel=channel,
            version=event.version,
            traffic_fraction=traffic_fraction,
            artifact_uri=event.artifact_uri,
            artifact_sha256=event.artifact_sha256,
        )
        value = self._codec.encode_event(MODEL_CHANNELS_TOPIC, pointer)
        self._out.send(self.topics.channels, channel_key(event.model_name, channel), value)
        return pointer

    def _clear(self, model_name: str, channel: Channel) -> None:
        # A tombstone: compaction drops the key, subscribers stop serving the channel.
        self._out.send(self.topics.channels, channel_key(model_name, channel), None)


def _known(versions: Mapping[int, VersionState], model_name: str, version: int) -> VersionState:
    state = versions.get(version)
    if state is None:
        known = ", ".join(str(v) for v in versions) or "none yet"
        raise ModelRegistryError(
            f"{model_name} has no version {version} (registered: {known}); "
            "see `flywheel models list`"
        )
    return state
