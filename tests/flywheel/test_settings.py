from pathlib import Path

import pytest

from flywheel.errors import SettingsError
from flywheel.settings import MASK, Settings


def test_defaults_use_the_local_stack_under_dot_flywheel() -> None:
    s = Settings.from_env({})
    assert s.uses_local_stack
    assert s.home == Path(".flywheel").absolute()
    assert s.lake == s.home / "lake"
    assert s.kafka_bootstrap == "127.0.0.1:9092"
    assert s.registry_url == "http://127.0.0.1:8081/apis/ccompat/v7"


def test_home_and_lake_move_with_their_variables(tmp_path: Path) -> None:
    s = Settings.from_env({"FLYWHEEL_HOME": str(tmp_path / "h")})
    assert s.lake == tmp_path / "h" / "lake"
    s = Settings.from_env({"FLYWHEEL_HOME": str(tmp_path), "FLYWHEEL_LAKE": str(tmp_path / "l")})
    assert s.lake == tmp_path / "l"


def test_external_cluster_needs_both_endpoints() -> None:
    s = Settings.from_env(
        {"FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092", "FLYWHEEL_SCHEMA_REGISTRY_URL": "http://r:8081"}
    )
    assert not s.uses_local_stack
    assert s.kafka_client_config()["bootstrap.servers"] == "k:9092"
    assert s.registry_url == "http://r:8081"
    with pytest.raises(SettingsError, match="FLYWHEEL_SCHEMA_REGISTRY_URL is unset"):
        Settings.from_env({"FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092"})
    with pytest.raises(SettingsError, match="FLYWHEEL_BOOTSTRAP_SERVERS is unset"):
        Settings.from_env({"FLYWHEEL_SCHEMA_REGISTRY_URL": "http://r:8081"})


@pytest.mark.parametrize("value", ["ninety", "0", "70000"])
def test_bad_port_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match="FLYWHEEL_STACK_KAFKA_PORT"):
        Settings.from_env({"FLYWHEEL_STACK_KAFKA_PORT": value})


def test_ports_must_differ() -> None:
    with pytest.raises(SettingsError, match="must differ"):
        Settings.from_env({"FLYWHEEL_STACK_REGISTRY_PORT": "9092"})
    with pytest.raises(SettingsError, match="must differ"):
        Settings.from_env({"FLYWHEEL_STACK_S3_PORT": "8081"})


def test_the_object_store_port_is_a_setting() -> None:
    assert Settings.from_env({}).ports.s3 == 9000
    assert Settings.from_env({"FLYWHEEL_STACK_S3_PORT": "19000"}).ports.s3 == 19000
    with pytest.raises(SettingsError, match="FLYWHEEL_STACK_S3_PORT"):
        Settings.from_env({"FLYWHEEL_STACK_S3_PORT": "s3"})


def test_kafka_settings_pass_through_and_secrets_are_masked() -> None:
    s = Settings.from_env(
        {
            "FLYWHEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FLYWHEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLYWHEEL_KAFKA_SASL_PASSWORD": "hunter2",
        }
    )
    config = s.kafka_client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.password"] == "hunter2"
    assert s.masked_kafka_config()["sasl.password"] == MASK
    assert s.masked_kafka_config()["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "hunter2" not in repr(s)
    assert "hunter2" not in str(s)


def test_settings_are_frozen() -> None:
    s = Settings.from_env({})
    with pytest.raises(AttributeError):
        s.home = Path("/elsewhere")  # type: ignore[misc]


def test_repr_hides_a_password_in_the_registry_url() -> None:
    from flywheel.settings import Settings

    settings = Settings.from_env(
        {
            "FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092",
            "FLYWHEEL_SCHEMA_REGISTRY_URL": "https://alice:hunter2@registry:8081",
        }
    )
    assert "hunter2" not in repr(settings)
    assert "registry:8081" in repr(settings)


def test_an_s3_lake_is_a_store_and_local_only_commands_name_the_fix(tmp_path: Path) -> None:
    env = {
        "FLYWHEEL_HOME": str(tmp_path),
        "FLYWHEEL_LAKE": "s3://lake-bucket/prod/lake",
        "FLYWHEEL_S3_ENDPOINT": "http://minio:9000",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "the-secret",
    }
    s = Settings.from_env(env)
    assert not s.lake_on_disk
    with pytest.raises(SettingsError, match=r"object store.*docs/object-storage\.md"):
        _ = s.lake
    location = s.storage(s.lake_uri)
    assert (location.path, location.endpoint) == ("lake-bucket/prod/lake", "http://minio:9000")
    assert "the-secret" not in repr(s) + repr(location)


def test_an_s3_lake_on_the_local_stack_uses_the_stacks_store(tmp_path: Path) -> None:
    s = Settings.from_env({"FLYWHEEL_HOME": str(tmp_path), "FLYWHEEL_LAKE": "s3://flywheel/lake"})
    location = s.storage(s.lake_uri)
    assert location.endpoint == f"http://127.0.0.1:{s.ports.s3}"
    assert location.credentials is not None  # the stack's key pair (generated on first use)
    assert Settings.from_env({"FLYWHEEL_HOME": str(tmp_path)}).lake == tmp_path / "lake"


def test_windows_and_models_are_local_unless_set(tmp_path: Path) -> None:
    settings = Settings.from_env({"FLYWHEEL_HOME": str(tmp_path)})
    assert settings.windows_store() is None and settings.models_root() == tmp_path / "models"
    assert settings.windows_cache_bytes == 8 << 30
    env = {"FLYWHEEL_HOME": str(tmp_path), "FLYWHEEL_WINDOWS": "w", "FLYWHEEL_MODELS": "m",
           "FLYWHEEL_WINDOWS_CACHE_BYTES": "1000"}  # fmt: skip
    settings = Settings.from_env(env)
    windows = settings.windows_store()
    assert windows is not None and windows.local_dir == Path("w").absolute()
    models = settings.models_root()
    assert not isinstance(models, Path) and models.local_dir == Path("m").absolute()
    assert settings.windows_cache_bytes == 1000


@pytest.mark.parametrize("value", ["0", "-5", "8GiB"])
def test_a_bad_window_cache_size_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match="FLYWHEEL_WINDOWS_CACHE_BYTES"):
        Settings.from_env({"FLYWHEEL_WINDOWS_CACHE_BYTES": value})
