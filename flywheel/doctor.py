"""`flywheel doctor`'s checks: configuration, connectivity, topic drift, registry compatibility.

Each check is a function returning `CheckResult`s; none raises for the condition it checks (a
failure is a result naming its fix). Checks never print secrets: `run_checks` replaces every
secret configuration value in their text with the mask, and URLs lose their user info.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import httpx
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from environments.isolation import TRUST_ENV, probe, trusted
from flywheel.errors import DoctorError, SettingsError
from flywheel.logs import SecretMask, secret_values
from flywheel.settings import Settings, public_url
from schemas.catalog import load_schema, subject_for
from schemas.compatibility import can_read
from schemas.errors import SchemaError
from streams.admin import TopicAdmin
from streams.errors import TopicError
from streams.serde import COMPATIBILITY
from streams.topics import ALL_TOPICS, TOPIC_VALUE_SCHEMAS, TopicSpec

CHECKS = ("config", "kafka", "registry", "topics", "schemas", "sandbox")
_NEEDS = {"topics": "kafka", "schemas": "registry"}  # a check runs after its server's
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class CheckResult:
    """One finding: `ok` or not, what was seen, and (when not ok) how to fix it."""

    check: str
    ok: bool
    detail: str
    fix: str = ""


def check_config(env: Mapping[str, str] | None = None) -> tuple[CheckResult, Settings | None]:
    """Settings.from_env(env): the result, and the settings when they are valid."""
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:
        return CheckResult(
            "config", False, str(exc), "fix the FLYWHEEL_* variable named above"
        ), None
    where = "the embedded local stack" if settings.uses_local_stack else "an external cluster"
    detail = (
        f"valid; {where}: bootstrap {settings.kafka_bootstrap}, registry "
        f"{public_url(settings.registry_url)}, lake {settings.lake_uri}"
        + (f", windows {settings.windows_uri}" if settings.windows_uri else "")
    )
    return CheckResult("config", True, detail), settings


def check_kafka(client_config: Mapping[str, str], timeout_s: float) -> CheckResult:
    """A metadata request to the bootstrap servers, answered within `timeout_s`."""
    bootstrap = client_config.get("bootstrap.servers", "?")
    auth_errors: list[KafkaError] = []  # librdkafka reports a refused login only through error_cb

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            auth_errors.append(error)

    # log_level 0: librdkafka would print a connect error per retry to stderr; we report once.
    config: dict[str, Any] = {**client_config, "log_level": 0, "socket.timeout.ms": _ms(timeout_s)}
    admin = AdminClient({**config, "error_cb": on_error})  # type: ignore[dict-item]  # stubs lack callbacks
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0.5)  # serve error_cb: an authentication failure is queued there
        if auth_errors:
            return CheckResult(
                "kafka", False, f"{bootstrap} refused the login: {auth_errors[0].str()}",
                "check FLYWHEEL_KAFKA_SASL_MECHANISM, FLYWHEEL_KAFKA_SASL_USERNAME and "
                "FLYWHEEL_KAFKA_SASL_PASSWORD (the broker's SCRAM/PLAIN user)",
            )  # fmt: skip
        return CheckResult(
            "kafka", False, f"no metadata from {bootstrap} within {timeout_s:g}s: {exc}",
            "start the broker (`flywheel stack up` or `docker compose up -d kafka`), or fix "
            "FLYWHEEL_BOOTSTRAP_SERVERS and the FLYWHEEL_KAFKA_* security settings",
        )  # fmt: skip
    return CheckResult(
        "kafka",
        True,
        f"{bootstrap}: {len(metadata.brokers)} broker(s), {len(metadata.topics)} topics",
    )


def check_registry(registry_url: str, timeout_s: float) -> CheckResult:
    """GET `<registry_url>/subjects` answers with a JSON list within `timeout_s`."""
    try:
        subjects = _get_json(registry_url, "/subjects", timeout_s)
    except (httpx.HTTPError, ValueError) as exc:
        return CheckResult(
            "registry", False, f"{public_url(registry_url)}/subjects failed: {exc}",
            "start the registry (`flywheel stack up` or `docker compose up -d schema-registry`) "
            "or fix FLYWHEEL_SCHEMA_REGISTRY_URL (Confluent API, e.g. Apicurio's /apis/ccompat/v7)",
        )  # fmt: skip
    count = len(subjects) if isinstance(subjects, list) else "?"
    return CheckResult("registry", True, f"{public_url(registry_url)}: {count} subjects")


def check_topics(
    client_config: Mapping[str, str], specs: Sequence[TopicSpec] = ALL_TOPICS
) -> list[CheckResult]:
    """Each declared topic exists and has its declared settings (`TopicAdmin.drift`)."""
    admin = TopicAdmin({**client_config, "log_level": "0"})
    try:
        present = admin.existing_partitions()
        drift = admin.drift(specs)
    except TopicError as exc:
        return [CheckResult("topics", False, str(exc), "make the broker reachable first")]
    results = [
        CheckResult(
            "topics", False, f"{s.name} is missing", "run `flywheel topics create` (idempotent)"
        )
        for s in specs
        if s.name not in present
    ]
    results += [
        CheckResult(
            "topics", False, f"{d.topic}: {d.setting} is {d.actual}, declared {d.declared}", d.fix()
        )
        for d in drift
    ]
    if not results:
        results.append(CheckResult("topics", True, f"{len(specs)} topics exist as declared"))
    return results


def check_schemas(
    registry_url: str,
    timeout_s: float,
    topic_schemas: Mapping[str, str] = TOPIC_VALUE_SCHEMAS,
) -> list[CheckResult]:
    """Each topic's latest registered value schema equals the shipped one, or the shipped one
    can read it (it registers as a compatible new version on first produce); the subject's
    compatibility level is BACKWARD_TRANSITIVE. Unregistered subjects pass (producers register)."""
    results: list[CheckResult] = []
    for topic, name in sorted(topic_schemas.items()):
        try:
            results.append(_check_subject(registry_url, timeout_s, topic, name))
        except (httpx.HTTPError, ValueError, KeyError, SchemaError) as exc:
            results.append(
                CheckResult(
                    "schemas",
                    False,
                    f"{subject_for(topic)}: cannot check: {exc}",
                    "make the registry reachable (see the registry check)",
                )
            )
    return results


def _check_subject(registry_url: str, timeout_s: float, topic: str, name: str) -> CheckResult:
    subject = subject_for(topic)
    path = f"/subjects/{quote(subject, safe='')}/versions/latest"
    try:
        latest = _get_json(registry_url, path, timeout_s)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return CheckResult("schemas", True, f"{subject}: not registered yet ({name})")
        raise
    shipped = load_schema(name)
    registered = json.loads(latest["schema"])
    version = latest.get("version", "?")
    if registered == shipped:
        status = f"{subject}: version {version} is the shipped {name}"
    else:
        problems = can_read(shipped, registered)
        if problems:
            return CheckResult(
                "schemas", False,
                f"{subject}: the shipped {name} cannot read registered version {version}: "
                + "; ".join(problems[:3]),
                f"evolve schemas/avro/{name}.avsc compatibly (new fields need defaults), or "
                "upgrade this deployment to the release that registered that version",
            )  # fmt: skip
        status = f"{subject}: shipped {name} reads version {version} (registers on first produce)"
    return _with_level(registry_url, timeout_s, subject, status)


def _with_level(registry_url: str, timeout_s: float, subject: str, status: str) -> CheckResult:
    try:
        config = _get_json(registry_url, f"/config/{quote(subject, safe='')}", timeout_s)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:  # no subject-level setting: the global one applies
            return CheckResult("schemas", True, status)
        raise
    level = config.get("compatibilityLevel") or config.get("compatibility")
    if level is not None and level != COMPATIBILITY:
        return CheckResult(
            "schemas", False, f"{subject}: compatibility is {level}, expected {COMPATIBILITY}",
            f"PUT {{registry}}/config/{subject} with "
            f'{{"compatibility": "{COMPATIBILITY}"}} (any producer also sets it on register)',
        )  # fmt: skip
    return CheckResult("schemas", True, status)


def _get_json(base_url: str, path: str, timeout_s: float) -> Any:
    response = httpx.get(base_url.rstrip("/") + path, timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def _ms(seconds: float) -> str:
    return str(max(10, int(seconds * 1000)))


def check_sandbox() -> CheckResult:
    """Whether model-written code can be isolated here (bubblewrap namespaces), or runs
    unisolated because the operator trusts it: what rollout workers will do on this host."""
    isolation = probe()
    if isolation.available:
        return CheckResult("sandbox", True, isolation.detail)
    if trusted():
        return CheckResult("sandbox", True, f"NOT ISOLATED ({TRUST_ENV}=1): {isolation.detail}")
    return CheckResult("sandbox", False, isolation.detail, isolation.fix)


def run_checks(
    env: Mapping[str, str] | None = None,
    only: Iterable[str] = CHECKS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[CheckResult]:
    """Run the checks named in `only` (in CHECKS order) with settings from `env`.

    Configuration is always read; when it is invalid only its result is returned. `topics` and
    `schemas` also run their server's check first and are reported as skipped (failed) when it
    fails. Raises DoctorError for a name not in CHECKS.
    """
    wanted = set(only)
    unknown = wanted - set(CHECKS)
    if unknown:
        raise DoctorError(f"unknown checks {sorted(unknown)}; choose from {', '.join(CHECKS)}")
    config, settings = check_config(env)
    if settings is None:
        return [config]
    results = [config] if "config" in wanted else []
    client = settings.kafka_client_config()
    steps: dict[str, Callable[[], list[CheckResult]]] = {
        "kafka": lambda: [check_kafka(client, timeout_s)],
        "registry": lambda: [check_registry(settings.registry_url, timeout_s)],
        "topics": lambda: check_topics(client),
        "schemas": lambda: check_schemas(settings.registry_url, timeout_s),
        "sandbox": lambda: [check_sandbox()],
    }
    needed = wanted | {_NEEDS[name] for name in wanted if name in _NEEDS}
    passed: dict[str, bool] = {}
    for name, step in steps.items():
        if name not in needed:
            continue
        needs = _NEEDS.get(name)
        if needs is not None and not passed[needs]:
            results.append(CheckResult(name, False, f"skipped: the {needs} check failed"))
            continue
        found = step()
        passed[name] = all(r.ok for r in found)
        if name in wanted:
            results.extend(found)
    return [_scrub(r, settings) for r in results]


def _scrub(result: CheckResult, settings: Settings) -> CheckResult:
    """Replace every secret value (Kafka passwords, the pseudonym key, a registry password)
    that a message from a client library might quote with the mask: the logs' own mask."""
    mask = SecretMask(secret_values(settings)).mask
    return replace(result, detail=mask(result.detail), fix=mask(result.fix))
