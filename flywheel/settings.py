"""Typed, frozen settings read once from `FLYWHEEL_*` environment variables (DESIGN §2)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from flywheel.errors import SettingsError
from ground.storage import ENDPOINT_VARIABLES, StorageLocation
from ground.store import Store
from streams.stack.ports import StackPorts

_PREFIX = "FLYWHEEL_"
# FLYWHEEL_KAFKA_SASL_PASSWORD -> sasl.password: passed through to librdkafka / aiokafka.
_KAFKA_PREFIX = "FLYWHEEL_KAFKA_"
_STORAGE_PREFIXES = ("AWS_", "FLYWHEEL_S3_")
DEFAULT_WINDOWS_CACHE_BYTES = 8 << 30  # shards of streamed windows a learner keeps (LRU)
_SECRET_WORDS = ("password", "secret", "key", "token", "credentials")
MASK = "****"


def public_url(url: str) -> str:
    """``url`` without user info (``https://user:pw@host`` → ``https://host``), safe to print."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def is_secret(name: str) -> bool:
    """True for configuration keys whose values must never be printed."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _location(value: str | None) -> str | None:
    """A storage variable's value: a URI as given, a directory made absolute; None if unset."""
    if not value:
        return None
    return value if "://" in value else str(Path(value).expanduser().absolute())


def _size(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if not value:
        return default
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size <= 0:
        raise SettingsError(f"{name}={value!r} is not a positive number of bytes")
    return size


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        port = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a port number; set it to 1-65535") from None
    if not 1 <= port <= 65535:
        raise SettingsError(f"{name}={port} is out of range; set it to 1-65535")
    return port


@dataclass(frozen=True)
class Settings:
    """Everything Flywheel reads from its environment, read once at the edge.

    `bootstrap_servers` and `schema_registry_url` are both set (an external cluster: nothing is
    started locally) or both None (the embedded local stack under `home` is used).

    `lake_uri` is FLYWHEEL_LAKE: a directory (default `$FLYWHEEL_HOME/lake`) or `s3://bucket/
    prefix` (`lake_store`). `windows_uri` is FLYWHEEL_WINDOWS: where learners publish their MDS
    windows and stream them from (None: each learner's windows stay on its own disk), with at
    most `windows_cache_bytes` (FLYWHEEL_WINDOWS_CACHE_BYTES) of shards cached locally.
    `models_uri` is FLYWHEEL_MODELS: where learners publish model artifacts (None:
    `$FLYWHEEL_HOME/models`).
    """

    home: Path
    lake_uri: str
    bootstrap_servers: str | None = None
    schema_registry_url: str | None = None
    ports: StackPorts = field(default_factory=StackPorts)
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    pseudonym_key: str | None = field(default=None, repr=False)  # secret: never printed
    # The S3 variables of the environment read (`ground.storage`): secrets, never printed.
    storage_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    windows_uri: str | None = None
    windows_cache_bytes: int = DEFAULT_WINDOWS_CACHE_BYTES
    models_uri: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from `env` (default: `os.environ`); raises SettingsError naming the fix."""
        env = os.environ if env is None else env
        home = Path(env.get(f"{_PREFIX}HOME") or ".flywheel").expanduser().absolute()
        lake = _location(env.get(f"{_PREFIX}LAKE")) or str(home / "lake")
        bootstrap = env.get(f"{_PREFIX}BOOTSTRAP_SERVERS") or None
        registry = env.get(f"{_PREFIX}SCHEMA_REGISTRY_URL") or None
        if (bootstrap is None) != (registry is None):
            missing = "SCHEMA_REGISTRY_URL" if registry is None else "BOOTSTRAP_SERVERS"
            raise SettingsError(
                f"{_PREFIX}{missing} is unset while its partner is set: set both "
                f"{_PREFIX}BOOTSTRAP_SERVERS and {_PREFIX}SCHEMA_REGISTRY_URL to use an external "
                "cluster, or neither to use the embedded local stack"
            )
        ports = StackPorts(
            kafka=_port(env, f"{_PREFIX}STACK_KAFKA_PORT", StackPorts.kafka),
            controller=_port(env, f"{_PREFIX}STACK_CONTROLLER_PORT", StackPorts.controller),
            registry=_port(env, f"{_PREFIX}STACK_REGISTRY_PORT", StackPorts.registry),
            s3=_port(env, f"{_PREFIX}STACK_S3_PORT", StackPorts.s3),
        )
        if len({ports.kafka, ports.controller, ports.registry, ports.s3}) != 4:
            raise SettingsError(f"the local stack's ports must differ, got {ports}")
        kafka_config = {
            name[len(_KAFKA_PREFIX) :].lower().replace("_", "."): value
            for name, value in env.items()
            if name.startswith(_KAFKA_PREFIX)
        }
        pseudonym_key = env.get(f"{_PREFIX}PSEUDONYM_KEY") or None
        storage_env = {n: v for n, v in env.items() if n.startswith(_STORAGE_PREFIXES)}
        windows = _location(env.get(f"{_PREFIX}WINDOWS"))
        cache = _size(env, f"{_PREFIX}WINDOWS_CACHE_BYTES", DEFAULT_WINDOWS_CACHE_BYTES)
        models = _location(env.get(f"{_PREFIX}MODELS"))
        return cls(home, lake, bootstrap, registry, ports, kafka_config, pseudonym_key, storage_env,
                   windows, cache, models)  # fmt: skip

    @property
    def lake_on_disk(self) -> bool:
        """True when the lake is a local directory, False for an object store."""
        return not self.lake_uri.startswith("s3://")

    @property
    def lake(self) -> Path:
        """The lake's directory. SettingsError when FLYWHEEL_LAKE is an object store: the
        commands that read the lake through `lake_store` (the sink, `flywheel query`) work
        there; the others need a local lake for now (docs/object-storage.md)."""
        if not self.lake_on_disk:
            raise SettingsError(
                f"FLYWHEEL_LAKE={self.lake_uri} is an object store, and this command works on a "
                "lake on local disk only so far (docs/object-storage.md lists those that work on "
                "the store); set FLYWHEEL_LAKE to a directory to run it"
            )
        return Path(self.lake_uri)

    def lake_store(self, uri: str | None = None) -> Store:
        """The lake (`uri`, a command's `--lake`, else `lake_uri`) as a store. For `s3://` on
        the embedded local stack, with no endpoint set (FLYWHEEL_S3_ENDPOINT or
        AWS_ENDPOINT_URL), the stack's object store and key pair are used; otherwise the
        environment's (`ground.storage`)."""
        return Store.at(self.storage(uri or self.lake_uri))

    def windows_store(self) -> Store | None:
        """Where learners publish windows (`windows_uri`, as `lake_store` resolves a URI);
        None when unset."""
        return None if self.windows_uri is None else Store.at(self.storage(self.windows_uri))

    def models_root(self) -> Path | Store:
        """Where model artifacts are published: FLYWHEEL_MODELS as a store, else
        `$FLYWHEEL_HOME/models`."""
        if self.models_uri is None:
            return self.home / "models"
        return Store.at(self.storage(self.models_uri))

    def storage(self, uri: str) -> StorageLocation:
        """`uri` as a storage location, S3 settings as `lake_store` describes."""
        env = self.storage_env
        configured = any(env.get(v) for v in ENDPOINT_VARIABLES)
        if uri.startswith("s3://") and self.uses_local_stack and not configured:
            from streams.stack.local import LocalStack

            env = LocalStack(self.home, self.ports).s3.client_environment()
        return StorageLocation.parse(uri, env)

    @property
    def uses_local_stack(self) -> bool:
        """True when no external cluster is configured."""
        return self.bootstrap_servers is None

    @property
    def kafka_bootstrap(self) -> str:
        """Bootstrap servers to connect to: the external ones or the local broker's."""
        return self.bootstrap_servers or f"127.0.0.1:{self.ports.kafka}"

    @property
    def registry_url(self) -> str:
        """Confluent-compatible registry base URL: the external one or local Apicurio's."""
        return self.schema_registry_url or (
            f"http://127.0.0.1:{self.ports.registry}/apis/ccompat/v7"
        )

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka configuration every client starts from (bootstrap + security pass-through)."""
        return {"bootstrap.servers": self.kafka_bootstrap, **self.kafka_config}

    def masked_kafka_config(self) -> dict[str, str]:
        """The client configuration with secret values replaced by a mask, safe to print."""
        return {k: MASK if is_secret(k) else v for k, v in self.kafka_client_config().items()}

    def __repr__(self) -> str:
        return (
            f"Settings(home={str(self.home)!r}, lake={self.lake_uri!r}, "
            f"windows={self.windows_uri!r}, "
            f"bootstrap={self.kafka_bootstrap!r}, registry={public_url(self.registry_url)!r}, "
            f"local_stack={self.uses_local_stack}, kafka_config={self.masked_kafka_config()!r})"
        )
