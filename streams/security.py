"""Kafka security settings, translated from librdkafka's names to faust's and aiokafka's.

Every confluent-kafka client takes the `FLYWHEEL_KAFKA_*` pass-through (`security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`, ...) as it is. faust's
aiokafka driver names the same things differently (`security_protocol`, `sasl_plain_username`,
an `ssl.SSLContext`), so this module is the one place that maps one onto the other:

    faust.App(..., broker_credentials=faust_credentials(settings.kafka_client_config()))
    AIOKafkaProducer(**aiokafka_kwargs(settings.kafka_client_config()))

Supported: PLAINTEXT, SSL (CA, client certificate and key, key password), SASL_PLAINTEXT and
SASL_SSL with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Anything else under `security.`, `sasl.`
or `ssl.` raises KafkaSecurityError naming the variable and the fix: a security setting the
faust path silently dropped would connect differently from every other client. Messages never
quote a secret value (`sasl.password`, `ssl.key.password`), only the variable's name.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import CredentialsT

from streams.errors import KafkaSecurityError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")
_SASL_KEYS = frozenset({"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password"})
_SSL_KEYS = frozenset(
    {
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)
# librdkafka's ssl.ca.location=probe: look for the system's CA bundle; Python's default does too.
_PROBE = "probe"


def env_name(key: str) -> str:
    """The variable setting librdkafka key `key`: `sasl.password` → FLYWHEEL_KAFKA_SASL_PASSWORD."""
    return "FLYWHEEL_KAFKA_" + key.upper().replace(".", "_")


def faust_credentials(kafka_config: Mapping[str, str]) -> CredentialsT | None:
    """faust `broker_credentials` equivalent to the librdkafka settings in `kafka_config`.

    None for PLAINTEXT (no security settings at all); `SSLCredentials` for SSL;
    `SASLCredentials` (mechanism, username, password, plus an SSL context for SASL_SSL) for SASL.
    Keys outside `security.*`, `sasl.*` and `ssl.*` are ignored. Raises KafkaSecurityError for
    an unknown protocol, an unsupported mechanism (GSSAPI, OAUTHBEARER), a missing username or
    password, SASL/SSL settings the protocol would not use, unsupported keys, or certificate
    files that cannot be loaded.
    """
    config = _security_subset(kafka_config)
    protocol = _protocol(config)
    _check_unused(config, protocol)
    context = _ssl_context(config) if protocol in ("SSL", "SASL_SSL") else None
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return SSLCredentials(context)
    username, password = _sasl_login(config)
    return SASLCredentials(
        username=username, password=password, ssl_context=context, mechanism=_mechanism(config)
    )


def aiokafka_kwargs(kafka_config: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments for a plain aiokafka client (producer, consumer, admin).

    `bootstrap_servers` (when `bootstrap.servers` is set) plus the security arguments faust's
    own driver passes for `faust_credentials(kafka_config)`: `security_protocol`, and
    `sasl_mechanism` / `sasl_plain_username` / `sasl_plain_password` / `ssl_context` as the
    protocol needs. Raises KafkaSecurityError as `faust_credentials` does.
    """
    credentials = faust_credentials(kafka_config)
    out: dict[str, Any] = {}
    if "bootstrap.servers" in kafka_config:
        out["bootstrap_servers"] = kafka_config["bootstrap.servers"]
    if credentials is None:
        out["security_protocol"] = "PLAINTEXT"
    elif isinstance(credentials, SSLCredentials):
        out.update(security_protocol="SSL", ssl_context=credentials.context)
    elif isinstance(credentials, SASLCredentials):
        out.update(
            security_protocol=credentials.protocol.value,
            sasl_mechanism=credentials.mechanism.value,
            sasl_plain_username=credentials.username,
            sasl_plain_password=credentials.password,
            ssl_context=credentials.ssl_context,
        )
    return out


def _security_subset(kafka_config: Mapping[str, str]) -> dict[str, str]:
    """The security keys of `kafka_config`, empty values dropped (an unset variable)."""
    return {
        key: value
        for key, value in kafka_config.items()
        if key.startswith(_SECURITY_PREFIXES) and value != ""
    }


def _protocol(config: Mapping[str, str]) -> str:
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise KafkaSecurityError(
            f"{env_name('security.protocol')}={config['security.protocol']!r} is not a Kafka "
            f"security protocol; set it to one of {', '.join(PROTOCOLS)}"
        )
    return protocol


def _check_unused(config: Mapping[str, str], protocol: str) -> None:
    """Refuse keys this translation does not support, and keys `protocol` would ignore."""
    known = _SASL_KEYS | _SSL_KEYS | {"security.protocol"}
    unknown = sorted(set(config) - known)
    if unknown:
        names = ", ".join(env_name(k) for k in unknown)
        raise KafkaSecurityError(
            f"{names}: not supported for faust/aiokafka clients (supported: SASL PLAIN and "
            "SCRAM with username/password, TLS with CA, client certificate and key files); "
            "unset it, or write PEM data to a file and set FLYWHEEL_KAFKA_SSL_*_LOCATION"
        )
    sasl = sorted(k for k in config if k in _SASL_KEYS)
    if sasl and not protocol.startswith("SASL_"):
        raise KafkaSecurityError(
            f"{', '.join(env_name(k) for k in sasl)} set but {env_name('security.protocol')} is "
            f"{protocol}: set it to SASL_PLAINTEXT or SASL_SSL, or unset the SASL variables"
        )
    tls = sorted(k for k in config if k in _SSL_KEYS)
    if tls and protocol not in ("SSL", "SASL_SSL"):
        raise KafkaSecurityError(
            f"{', '.join(env_name(k) for k in tls)} set but {env_name('security.protocol')} is "
            f"{protocol}: set it to SSL or SASL_SSL, or unset the SSL variables"
        )


def _mechanism(config: Mapping[str, str]) -> str:
    # librdkafka accepts both spellings; they must agree when both are set.
    named = {config[k].upper() for k in ("sasl.mechanism", "sasl.mechanisms") if k in config}
    if len(named) > 1:
        raise KafkaSecurityError(
            f"{env_name('sasl.mechanism')} and {env_name('sasl.mechanisms')} disagree "
            f"({' vs '.join(sorted(named))}): set only {env_name('sasl.mechanism')}"
        )
    if not named:
        raise KafkaSecurityError(
            f"SASL needs a mechanism: set {env_name('sasl.mechanism')} to one of "
            f"{', '.join(MECHANISMS)}"
        )
    mechanism = named.pop()
    if mechanism not in MECHANISMS:
        raise KafkaSecurityError(
            f"{env_name('sasl.mechanism')}={mechanism} is not supported (GSSAPI/Kerberos and "
            f"OAUTHBEARER are not wired up); use one of {', '.join(MECHANISMS)}"
        )
    return mechanism


def _sasl_login(config: Mapping[str, str]) -> tuple[str, str]:
    missing = [env_name(k) for k in ("sasl.username", "sasl.password") if k not in config]
    if missing:
        raise KafkaSecurityError(
            f"SASL {config.get('sasl.mechanism', '')} needs a username and password: "
            f"set {' and '.join(missing)}"
        )
    return config["sasl.username"], config["sasl.password"]


def _ssl_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """A client TLS context: the CA (file or directory; system CAs when unset or `probe`), the
    client certificate and key when set, hostname checks unless turned off as librdkafka does."""
    ca = config.get("ssl.ca.location")
    cafile = capath = None
    if ca is not None and ca != _PROBE:
        cafile, capath = (None, ca) if Path(ca).is_dir() else (ca, None)
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(
            f"{env_name('ssl.ca.location')}={ca}: cannot load CA certificates "
            f"({type(exc).__name__}: {exc.strerror or exc}); point it at a PEM file or directory"
        ) from None
    _load_client_certificate(context, config)
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    if config.get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_certificate(context: ssl.SSLContext, config: Mapping[str, str]) -> None:
    cert = config.get("ssl.certificate.location")
    key = config.get("ssl.key.location")
    if cert is None:
        if key is not None or "ssl.key.password" in config:
            raise KafkaSecurityError(
                f"{env_name('ssl.key.location')} / {env_name('ssl.key.password')} set without "
                f"{env_name('ssl.certificate.location')}: set the client certificate file too"
            )
        return
    try:
        # The password goes to OpenSSL only; the error below names the variable, not its value.
        context.load_cert_chain(cert, keyfile=key, password=config.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(
            f"cannot load the client certificate {env_name('ssl.certificate.location')}={cert} "
            f"with key {env_name('ssl.key.location')}={key} ({type(exc).__name__}: "
            f"{exc.strerror or exc}); check the files and {env_name('ssl.key.password')}"
        ) from None
