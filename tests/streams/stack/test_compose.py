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
    assert services["s3"]["image"] == versions.S3PROXY_IMAGE


def test_the_object_store_signs_requests_keeps_objects_and_reads_its_secret_from_env() -> None:
    s3 = _services()["s3"]
    env = s3["environment"]
    assert env["S3PROXY_AUTHORIZATION"] == "aws-v2-or-v4"
    assert env["JCLOUDS_PROVIDER"] == "filesystem-nio2"
    assert env["S3PROXY_CREDENTIAL"].startswith("${FLYWHEEL_S3_SECRET_ACCESS_KEY:?")  # never inline
    assert f"s3-data:{env['JCLOUDS_FILESYSTEM_BASEDIR']}" in s3["volumes"]
    script = s3["entrypoint"][-1]
    assert "mkdir -p /data/flywheel" in script  # the default bucket
    assert script.startswith("umask 077 && ") and "chmod 700 /data /data/flywheel" in script


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


# --- the platform's own services (Dockerfile image, `flywheel <command>`) ---------------------

ROOT = COMPOSE.parent
PLATFORM_IMAGE = "flywheel-platform:0.1.0"


def _platform_services() -> dict[str, Any]:
    return {n: s for n, s in _services().items() if s["image"] == PLATFORM_IMAGE}


def _flywheel_invocations() -> list[tuple[str, list[str]]]:
    """(where, args) of every `flywheel` call: service commands and CMD healthchecks."""
    calls: list[tuple[str, list[str]]] = []
    for name, service in _platform_services().items():
        calls.append((f"{name}.command", list(service["command"])))
        test = service["healthcheck"]["test"]
        if test[:2] == ["CMD", "flywheel"]:
            calls.append((f"{name}.healthcheck", list(test[2:])))
    return calls


def test_the_platform_image_is_the_package_version_and_runs_every_stage() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"flywheel-platform:{version}" == PLATFORM_IMAGE
    services = _platform_services()
    commands = {name: s["command"][0] for name, s in services.items()}
    assert {"gateway", "process", "sink", "features", "learn", "simulate", "topics"} <= set(
        commands.values()
    )
    for name, service in services.items():
        assert service.get("build") == ".", f"{name} is not built from ./Dockerfile"


def test_every_service_command_is_a_real_cli_entry_point_with_valid_flags() -> None:
    import click

    from flywheel.cli import cli  # imports every command module: slow, so only here

    calls = _flywheel_invocations()
    assert len(calls) >= 10
    for where, args in calls:
        command: click.Command = cli
        path = ["flywheel"]
        parent = click.Context(cli, info_name="flywheel")
        while isinstance(command, click.Group):
            assert args, f"{where}: `{' '.join(path)}` needs a subcommand"
            sub = command.get_command(parent, args[0])
            assert sub is not None, f"{where}: `{' '.join(path)} {args[0]}` does not exist"
            path.append(args.pop(0))
            command, parent = sub, click.Context(sub, info_name=path[-1], parent=parent)
        # Parses and converts every option (types, ranges, choices) without invoking the command.
        try:
            command.make_context(" ".join(path), args, parent=parent.parent)
        except click.UsageError as exc:
            raise AssertionError(f"{where}: {' '.join(path)} {args}: {exc}") from exc


def test_configuration_uses_only_variables_settings_reads() -> None:
    from flywheel.settings import Settings

    source = (ROOT / "flywheel" / "settings.py").read_text()
    for name, service in _platform_services().items():
        env: dict[str, str] = service["environment"]
        for variable in env:
            assert variable.startswith("FLYWHEEL_"), f"{name}: {variable}"
            suffix = variable.removeprefix("FLYWHEEL_")
            assert f"{{_PREFIX}}{suffix}" in source or variable.startswith("FLYWHEEL_KAFKA_"), (
                f"{name}: {variable} is not read by flywheel/settings.py"
            )
        # `${VAR:-}` interpolates to "" without a value: what Settings sees then.
        resolved = {k: "" if v.startswith("${") else v for k, v in env.items()}
        settings = Settings.from_env(resolved)
        assert not settings.uses_local_stack, f"{name} would start an embedded stack"
        assert settings.kafka_bootstrap == "kafka:19092"
        assert settings.registry_url.startswith("http://schema-registry:8080/")


def test_state_lives_in_named_volumes() -> None:
    declared = set(yaml.safe_load(COMPOSE.read_text())["volumes"])
    assert {"home", "lake", "models", "kafka-data"} <= declared
    services = _services()
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source in declared, f"{name}: {source} is not a named volume"
    assert "lake:/var/lib/flywheel/lake" in services["sink"]["volumes"]
    assert "models:/var/lib/flywheel/models" in services["learner"]["volumes"]


def test_joiner_replicas_share_one_group_and_the_learner_can_reserve_a_gpu() -> None:
    services = _services()
    joiner = services["joiner"]
    assert joiner["deploy"]["replicas"] == 2
    command = joiner["command"]
    assert command[command.index("--group") + 1] == "flywheel.joiner"
    gpu = services["learner-gpu"]
    assert gpu["profiles"] == ["gpu"]  # a reservation fails on hosts without one: opt in
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert gpu["command"] == services["learner"]["command"]


def test_platform_services_wait_for_the_topics_and_check_their_health() -> None:
    for name, service in _platform_services().items():
        if name == "topics":
            assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
            continue
        assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        health = service["healthcheck"]
        assert health["interval"] and health["timeout"] and health["retries"] >= 1


def test_the_dockerfile_builds_like_the_makefile_and_runs_as_a_user() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    assert "FROM python:3.11-slim" in lines
    install = next(line for line in lines if "uv pip install" in line)
    assert "--override overrides.txt" in install
    user = next(line for line in lines if line.startswith("USER "))
    assert "root" not in user and user.split()[1].split(":")[0] != "0"
    assert 'ENTRYPOINT ["flywheel"]' in lines
