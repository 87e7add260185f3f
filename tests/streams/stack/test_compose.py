"""docker-compose.yml parses, pins every image, and agrees with the local stack's versions."""

from pathlib import Path
from typing import Any

import yaml

from streams.stack import versions

COMPOSE = Path(__file__).resolve().parents[3] / "docker-compose.yml"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def test_every_image_is_pinned_to_a_version() -> None:
    for name, service in _services().items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: image {image} has no tag"
        assert tag not in ("", "latest"), f"{name}: image {image} is not pinned"
        assert tag[0].isdigit(), f"{name}: tag {tag} is not a version"


def test_versions_agree_with_the_local_stack() -> None:
    services = _services()
    assert services["kafka"]["image"] == versions.KAFKA_IMAGE
    assert services["schema-registry"]["image"] == versions.APICURIO_IMAGE


def test_every_service_has_a_healthcheck_and_the_registry_waits_for_kafka() -> None:
    services = _services()
    for name, service in services.items():
        assert service["healthcheck"]["test"], f"{name} has no healthcheck"
    depends = services["schema-registry"]["depends_on"]["kafka"]
    assert depends["condition"] == "service_healthy"


def test_the_registry_stores_schemas_in_kafka() -> None:
    env = _services()["schema-registry"]["environment"]
    assert env["APICURIO_STORAGE_KIND"] == "kafkasql"
    assert env["APICURIO_KAFKASQL_BOOTSTRAP_SERVERS"] == "kafka:19092"
