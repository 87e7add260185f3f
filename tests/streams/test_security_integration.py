"""Every kind of client against a real SASL/SCRAM broker with ACLs (Kafka 4.1, KRaft).

The secured broker (tests/streams/sasl_broker.py) runs beside the local stack, whose registry
keeps the schemas. `admin` creates the topics and ACLs: `flywheel-svc` may read and write every
test topic; `reader` (a serving replica's rights) may read them and write only `models.acks`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, Message, Producer

# The stubs re-export these without `as`, so mypy misses them; they are the documented names.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from flywheel.clients import codec, telemetry_client
from flywheel.commands.doctor import doctor
from flywheel.doctor import run_checks
from flywheel.settings import MASK, Settings
from model_registry.artifacts import ArtifactRef
from model_registry.errors import ModelRegistryError
from model_registry.registry import ModelRegistry
from schemas.enums import Channel
from streams.admin import TopicAdmin
from streams.security import aiokafka_kwargs, faust_credentials
from streams.topics import TopicSpec, topic
from tests.processors.joiner.test_joiner_worker import (
    Topics,
    Worker,
    produce,
    read,
    rewards_by_id,
    session_events,
    tick,
    wait_started,
)
from tests.readback import read_events
from tests.sample_events import offered
from tests.streams.sasl_broker import ADMIN, SaslBroker, running_sasl_broker

pytestmark = pytest.mark.integration

SVC, READER = "flywheel-svc", "reader"
AIOKAFKA_TOPIC = TopicSpec("security.aiokafka", "k", "raw bytes", 1)
SPECS = (
    topic("telemetry.suggestions"),
    topic("models.versions"),
    topic("models.channels"),
    topic("models.acks"),
    AIOKAFKA_TOPIC,
)
_READ_WRITE = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
_READ_ONLY = (AclOperation.READ, AclOperation.DESCRIBE)


def _allow(user: str, kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
        AclPermissionType.ALLOW,
    )  # fmt: skip


def _acls() -> list[AclBinding]:
    bindings = [_allow(u, ResourceType.GROUP, "*", AclOperation.READ) for u in (SVC, READER)]
    for spec in SPECS:
        bindings += [_allow(SVC, ResourceType.TOPIC, spec.name, op) for op in _READ_WRITE]
        bindings += [_allow(READER, ResourceType.TOPIC, spec.name, op) for op in _READ_ONLY]
    # A serving replica acknowledges models on models.acks: reader's only write.
    bindings.append(_allow(READER, ResourceType.TOPIC, "models.acks", AclOperation.WRITE))
    return bindings


@pytest.fixture(scope="module")
def sasl(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    """The secured broker with the test topics and ACLs in place (once per module)."""
    with running_sasl_broker(tmp_path_factory.mktemp("sasl-broker")) as broker:
        admin_config = broker.client_config(ADMIN, "SCRAM-SHA-512")
        TopicAdmin(admin_config).ensure(SPECS)
        admin = AdminClient({**admin_config})
        for future in admin.create_acls(_acls()).values():
            future.result(timeout=30)
        _wait_until_visible(broker.client_config(READER), {s.name for s in SPECS})
        yield broker


def _wait_until_visible(config: dict[str, str], topics: set[str]) -> None:
    """ACLs reach the broker through the metadata log: wait until `config`'s user sees them."""
    admin = AdminClient({**config})
    for _ in range(100):
        if topics <= set(admin.list_topics(timeout=5).topics):
            return
        time.sleep(0.1)
    raise AssertionError(f"{config['sasl.username']} never saw {sorted(topics)}")


def _settings(sasl: SaslBroker, stack: Settings, home: Path, user: str, **kafka: str) -> Settings:
    env = {**sasl.env(user, stack.registry_url, **kafka), "FLYWHEEL_HOME": str(home)}
    return Settings.from_env(env)


# a) authorised services work ------------------------------------------------------------------


def test_the_sdk_produces_and_a_consumer_reads_back(
    sasl: SaslBroker, stack: Settings, tmp_path: Path
) -> None:
    settings = _settings(sasl, stack, tmp_path, SVC)
    sent = [offered(f"s-{uuid.uuid4()}") for _ in range(20)]
    with telemetry_client(settings, spool_dir=tmp_path / "spool") as client:
        for event in sent:
            client.send(event)
        assert client.flush(30) == 0
        assert (client.stats.acked, client.stats.failed, client.stats.spooled) == (20, 0, 0)
    got = read_events(settings, ["telemetry.suggestions"], [e.event_id for e in sent])
    assert sorted(str(r.record["event_id"]) for r in got) == sorted(e.event_id for e in sent)


def test_the_registry_publishes_and_a_reader_sees_the_pointer_but_cannot_publish(
    sasl: SaslBroker, stack: Settings, tmp_path: Path
) -> None:
    model = f"sec-{uuid.uuid4().hex[:8]}"
    svc = _settings(sasl, stack, tmp_path, SVC)
    registry = ModelRegistry(svc.kafka_client_config(), codec(svc), timeout_s=20)
    registry.register(model, ArtifactRef("file:///m/1", "0" * 64), parent_version=None,
                      reward_fn="accept_minus_edit")  # fmt: skip
    registry.promote(model, 1, reason="security test")
    # c) reader reads the pointer (a serving replica) but may not move it.
    reader = _settings(sasl, stack, tmp_path, READER)
    as_reader = ModelRegistry(reader.kafka_client_config(), codec(reader), timeout_s=20)
    assert as_reader.channels(model)[Channel.PRODUCTION].version == 1
    with pytest.raises(ModelRegistryError, match=r"(?i)authorization failed"):
        as_reader.rollback(model, to_fallback=True)
    assert registry.channels(model)[Channel.PRODUCTION].version == 1


def test_reader_is_refused_topic_authorization_on_models_channels(sasl: SaslBroker) -> None:
    # By topic: delivery reports of two topics come in either order (the refused one can be
    # reported after the granted one, once the producer's metadata retries give up).
    errors: dict[str, KafkaError | None] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        errors[str(message.topic())] = error

    producer = Producer({**sasl.client_config(READER), "enable.idempotence": False})
    producer.produce("models.channels", b"x", b"m:production", on_delivery=delivered)
    producer.produce("models.acks", b"ack", b"replica-1", on_delivery=delivered)
    assert producer.flush(20) == 0
    refused = errors["models.channels"]
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert errors["models.acks"] is None  # its one granted write


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_every_mechanism_authenticates(sasl: SaslBroker, mechanism: str) -> None:
    admin = AdminClient({**sasl.client_config(SVC, mechanism)})
    assert {s.name for s in SPECS} <= set(admin.list_topics(timeout=10).topics)


def test_aiokafka_clients_built_by_the_faust_translation_round_trip(sasl: SaslBroker) -> None:
    config = sasl.client_config(SVC, "SCRAM-SHA-512")
    key = uuid.uuid4().hex.encode()

    async def round_trip() -> bytes:
        producer = AIOKafkaProducer(**aiokafka_kwargs(config))
        await producer.start()
        try:
            await producer.send_and_wait(AIOKAFKA_TOPIC.name, b"via aiokafka", key=key)
        finally:
            await producer.stop()
        # What faust's driver hands its consumers for `broker_credentials=faust_credentials(..)`.
        consumer = AIOKafkaConsumer(
            AIOKAFKA_TOPIC.name, bootstrap_servers=sasl.bootstrap, group_id=f"g-{key.decode()}",
            auto_offset_reset="earliest", **credentials_to_aiokafka_auth(faust_credentials(config)),
        )  # fmt: skip
        await consumer.start()
        try:
            while True:
                message = await asyncio.wait_for(consumer.getone(), timeout=30)
                if message.key == key:
                    return bytes(message.value or b"")
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == b"via aiokafka"


# b) a wrong password is refused, and never shown ----------------------------------------------


def _wrong_password() -> str:
    return f"wrong-{uuid.uuid4().hex}"


def test_a_wrong_password_fails_authentication_without_showing_it(
    sasl: SaslBroker, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    wrong = _wrong_password()
    caplog.set_level(logging.DEBUG)
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            **sasl.client_config(SVC),
            "sasl.password": wrong,
            # The config stubs allow scalars only; confluent-kafka takes these callables.
            "logger": logging.getLogger("test.librdkafka"),  # type: ignore[dict-item]
            "error_cb": errors.append,  # type: ignore[dict-item]
        }
    )
    with pytest.raises(KafkaException) as raised:
        admin.list_topics(timeout=5)
    admin.poll(0.5)  # serves the error callback and the queued log lines
    [auth] = {e.code(): e for e in errors if e.code() == KafkaError._AUTHENTICATION}.values()
    assert "Authentication failed" in auth.str() and "invalid credentials" in auth.str()
    assert "Authentication failed" in caplog.text
    seen = str(raised.value) + auth.str() + caplog.text + "".join(capfd.readouterr())
    assert wrong not in seen and sasl.passwords[SVC] not in seen


def test_aiokafka_with_a_wrong_password_is_refused_without_showing_it(
    sasl: SaslBroker, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = _wrong_password()
    caplog.set_level(logging.DEBUG)
    config = {**sasl.client_config(SVC, "SCRAM-SHA-256"), "sasl.password": wrong}

    async def start() -> None:
        producer = AIOKafkaProducer(**aiokafka_kwargs(config), request_timeout_ms=10_000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError) as raised:  # "Unable to bootstrap from ..."
        asyncio.run(start())
    # aiokafka logs the broker's reason: SaslAuthenticationFailed, invalid credentials.
    assert "SaslAuthenticationFailed" in caplog.text and "invalid credentials" in caplog.text
    assert wrong not in str(raised.value) + caplog.text


# d) secrets never appear in settings, doctor or its command -----------------------------------


def test_secrets_stay_out_of_settings_and_doctor(
    sasl: SaslBroker, stack: Settings, tmp_path: Path
) -> None:
    wrong = _wrong_password()
    env = {**sasl.env(SVC, stack.registry_url, SASL_PASSWORD=wrong), "FLYWHEEL_HOME": str(tmp_path)}
    settings = Settings.from_env(env)
    assert wrong not in repr(settings)
    assert settings.masked_kafka_config()["sasl.password"] == MASK
    assert wrong not in str(settings.masked_kafka_config())
    [kafka] = run_checks(env, only=["kafka"], timeout_s=3)
    assert not kafka.ok and "FLYWHEEL_KAFKA_SASL_PASSWORD" in kafka.fix
    assert "refused the login" in kafka.detail
    assert wrong not in kafka.detail + kafka.fix
    result = CliRunner().invoke(doctor, ["--check", "kafka", "--timeout", "3s"], env=env)
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and wrong not in result.output
    good = {**sasl.env(SVC, stack.registry_url), "FLYWHEEL_HOME": str(tmp_path)}
    [kafka] = run_checks(good, only=["kafka"], timeout_s=5)
    assert kafka.ok, kafka.detail


def test_the_faust_joiner_works_over_sasl(
    sasl: SaslBroker, stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joiner (faust, aiokafka) end to end on the secured broker, its credentials from
    FLYWHEEL_KAFKA_*. As the super user: its changelog topics and transactional ids need the
    broad ACLs listed in docs/operations.md."""
    env = {**sasl.env(ADMIN, stack.registry_url), "FLYWHEEL_HOME": str(tmp_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the worker subprocess inherits them
    settings = Settings.from_env(env)
    topics = Topics(f"sec-{uuid.uuid4().hex[:8]}")
    TopicAdmin(settings.kafka_client_config()).ensure(topics.specs())
    worker = Worker(settings, topics, f"sec-joiner-{uuid.uuid4().hex[:8]}", tmp_path / "joiner")
    events, expected = session_events("s-sec")
    try:
        worker.start()
        wait_started(worker)
        produce(settings, topics, events)
        time.sleep(2)  # the in-window events first (telemetry topics are read in parallel)
        produce(settings, topics, [tick("s-sec")])
        assert rewards_by_id(read(settings, topics.rewards, len(expected))) == expected
    finally:
        worker.stop()
    assert sasl.passwords[ADMIN] not in worker.log.read_text(errors="replace")
