"""`flywheel doctor` against the real local stack: all checks pass; drift and an incompatible
registered schema are found, each with its fix."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from flywheel.doctor import check_schemas, check_topics, run_checks
from flywheel.settings import Settings
from schemas.catalog import subject_for
from streams.topics import TopicSpec

pytestmark = pytest.mark.integration


def test_every_check_passes_on_the_local_stack(stack: Settings) -> None:
    results = run_checks(timeout_s=10.0)
    failed = [r for r in results if not r.ok]
    assert not failed, failed
    assert {r.check for r in results} == {"config", "kafka", "registry", "topics", "schemas",
                                          "sandbox"}  # fmt: skip


def test_topic_drift_is_reported_with_the_command_that_fixes_it(
    stack: Settings, unique: str
) -> None:
    config = stack.kafka_client_config()
    admin_config: dict[str, str | int | float | bool] = {**config}
    admin = AdminClient(admin_config)
    futures = admin.create_topics([NewTopic(unique, 2, 1, config={"retention.ms": "1000"})])
    futures[unique].result(timeout=30)
    spec = TopicSpec(unique, "k", "Reward", 2, retention_ms=7 * 24 * 3600 * 1000)
    missing = TopicSpec(f"{unique}.missing", "k", "Reward", 1)
    results = check_topics(config, [spec, missing])
    by_detail = {r.detail: r for r in results}
    assert all(not r.ok for r in results)
    assert f"{missing.name} is missing" in by_detail
    drift = by_detail[f"{unique}: retention.ms is 1000, declared 604800000"]
    assert "kafka-configs.sh --alter" in drift.fix


def test_an_incompatible_registered_schema_fails_the_schemas_check(
    stack: Settings, unique: str
) -> None:
    foreign = {
        "type": "record", "name": "Reward", "namespace": "flywheel.v1",
        "fields": [{"name": "reward", "type": "string"}],
    }  # fmt: skip
    response = httpx.post(
        f"{stack.registry_url}/subjects/{subject_for(unique)}/versions",
        json={"schema": json.dumps(foreign)},
        timeout=10,
    )
    response.raise_for_status()
    results = check_schemas(stack.registry_url, 10.0, {unique: "Reward"})
    assert len(results) == 1 and not results[0].ok
    assert "cannot read registered version" in results[0].detail
    assert "schemas/avro/Reward.avsc" in results[0].fix
    fresh = check_schemas(stack.registry_url, 10.0, {f"{unique}.new": "Reward"})
    assert fresh[0].ok and "not registered yet" in fresh[0].detail
