"""librdkafka security settings → faust credentials / aiokafka arguments, without a broker."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from faust.types.auth import AuthProtocol, SASLMechanism

from flywheel.settings import Settings
from ground.errors import FlywheelError
from streams.errors import KafkaSecurityError
from streams.security import aiokafka_kwargs, env_name, faust_credentials

PASSWORD = "pw-Zq8-never-printed"
KEY_PASSWORD = "key-pw-7Hx-never-printed"
SASL = {
    "bootstrap.servers": "b1:9092,b2:9092",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": "flywheel-svc",
    "sasl.password": PASSWORD,
}


def _cert(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=name == "test-ca", path_length=None), True)
        .sign(signer, hashes.SHA256())
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA file and a client certificate with a password-protected key (EC: fast to make)."""
    out = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = _cert("test-ca", ca_key, ca_name, ca_key)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("flywheel-svc", client_key, ca_name, ca_key)
    paths = {"ca": out / "ca.pem", "cert": out / "client.pem", "key": out / "client.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(client.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        client_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
        )
    )
    return paths


def test_plaintext_needs_no_credentials() -> None:
    assert faust_credentials({}) is None
    assert faust_credentials({"bootstrap.servers": "b:9092", "linger.ms": "5"}) is None
    assert faust_credentials({"security.protocol": "plaintext"}) is None
    assert aiokafka_kwargs({"bootstrap.servers": "b:9092"}) == {
        "bootstrap_servers": "b:9092",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "scram-sha-512"])
def test_sasl_plaintext_becomes_sasl_credentials(mechanism: str) -> None:
    credentials = faust_credentials({**SASL, "sasl.mechanism": mechanism})
    assert isinstance(credentials, SASLCredentials)
    assert credentials.protocol is AuthProtocol.SASL_PLAINTEXT
    assert credentials.mechanism is SASLMechanism(mechanism.upper())
    assert (credentials.username, credentials.password) == ("flywheel-svc", PASSWORD)
    assert credentials.ssl_context is None
    assert PASSWORD not in repr(credentials)


def test_aiokafka_kwargs_are_what_fausts_driver_passes() -> None:
    kwargs = aiokafka_kwargs(SASL)
    assert kwargs == {
        "bootstrap_servers": "b1:9092,b2:9092",
        **credentials_to_aiokafka_auth(faust_credentials(SASL)),
    }
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert kwargs["sasl_plain_password"] == PASSWORD


def test_aiokafka_clients_and_faust_accept_the_translation() -> None:
    async def build() -> None:
        # Constructing (not starting) validates the arguments; no broker is contacted.
        AIOKafkaProducer(**aiokafka_kwargs(SASL))
        AIOKafkaConsumer("t", group_id="g", **aiokafka_kwargs(SASL))

    asyncio.run(build())
    credentials = faust_credentials(SASL)
    app = faust.App("security-test", broker="kafka://b1:9092", broker_credentials=credentials)
    assert app.conf.broker_credentials is credentials


def test_the_settings_pass_through_reaches_the_faust_credentials() -> None:
    settings = Settings.from_env(
        {
            "FLYWHEEL_BOOTSTRAP_SERVERS": "b1:9092",
            "FLYWHEEL_SCHEMA_REGISTRY_URL": "http://r:8081",
            "FLYWHEEL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "FLYWHEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLYWHEEL_KAFKA_SASL_USERNAME": "flywheel-svc",
            "FLYWHEEL_KAFKA_SASL_PASSWORD": PASSWORD,
        }
    )
    credentials = faust_credentials(settings.kafka_client_config())
    assert isinstance(credentials, SASLCredentials)
    assert credentials.mechanism is SASLMechanism.SCRAM_SHA_512
    assert credentials.password == PASSWORD
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.masked_kafka_config())


def test_ssl_with_a_client_certificate_and_an_encrypted_key(pki: dict[str, Path]) -> None:
    credentials = faust_credentials(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"]),
            "ssl.certificate.location": str(pki["cert"]),
            "ssl.key.location": str(pki["key"]),
            "ssl.key.password": KEY_PASSWORD,
        }
    )
    assert isinstance(credentials, SSLCredentials)
    assert credentials.protocol is AuthProtocol.SSL
    assert credentials.context.verify_mode is ssl.CERT_REQUIRED
    assert credentials.context.check_hostname
    assert [c["subject"] for c in credentials.context.get_ca_certs()] == [
        ((("commonName", "test-ca"),),)
    ]
    assert aiokafka_kwargs({"security.protocol": "SSL"})["security_protocol"] == "SSL"


def test_sasl_over_ssl_carries_the_tls_context(pki: dict[str, Path]) -> None:
    config = {**SASL, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki["ca"])}
    credentials = faust_credentials(config)
    assert isinstance(credentials, SASLCredentials)
    assert credentials.protocol is AuthProtocol.SASL_SSL
    assert credentials.ssl_context is not None
    assert credentials.ssl_context.verify_mode is ssl.CERT_REQUIRED
    assert aiokafka_kwargs(config)["security_protocol"] == "SASL_SSL"
    # The CA as a directory (librdkafka allows both), or probe for the system's CAs.
    for ca in (str(pki["ca"].parent), "probe"):
        assert faust_credentials({**config, "ssl.ca.location": ca}) is not None


def test_hostname_and_certificate_checks_can_be_turned_off_as_in_librdkafka() -> None:
    base = {"security.protocol": "SSL"}
    no_host = faust_credentials({**base, "ssl.endpoint.identification.algorithm": "none"})
    no_verify = faust_credentials({**base, "enable.ssl.certificate.verification": "false"})
    assert isinstance(no_host, SSLCredentials) and isinstance(no_verify, SSLCredentials)
    assert not no_host.context.check_hostname
    assert no_host.context.verify_mode is ssl.CERT_REQUIRED
    assert no_verify.context.verify_mode is ssl.CERT_NONE


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({**SASL, "sasl.mechanism": "GSSAPI"}, ["FLYWHEEL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"]),
        ({**SASL, "sasl.mechanism": "OAUTHBEARER"}, ["OAUTHBEARER", "PLAIN"]),
        ({k: v for k, v in SASL.items() if k != "sasl.mechanism"}, ["needs a mechanism"]),
        ({**SASL, "sasl.mechanisms": "PLAIN"}, ["FLYWHEEL_KAFKA_SASL_MECHANISMS", "disagree"]),
        ({k: v for k, v in SASL.items() if k != "sasl.username"}, ["FLYWHEEL_KAFKA_SASL_USERNAME"]),
        ({**SASL, "security.protocol": "PLAINTEXT"}, ["FLYWHEEL_KAFKA_SASL_PASSWORD", "SASL_SSL"]),
        ({**SASL, "security.protocol": "TLS"}, ["'TLS'", "SASL_SSL"]),
        ({**SASL, "ssl.ca.location": "/ca.pem"}, ["FLYWHEEL_KAFKA_SSL_CA_LOCATION", "SSL or"]),
        ({**SASL, "sasl.oauthbearer.config": "x"}, ["FLYWHEEL_KAFKA_SASL_OAUTHBEARER_CONFIG"]),
        (
            {"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"},
            ["FLYWHEEL_KAFKA_SSL_KEYSTORE_LOCATION", "not supported"],
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            ["FLYWHEEL_KAFKA_SSL_CA_LOCATION=/nonexistent/ca.pem", "PEM file"],
        ),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/k.pem"},
            ["FLYWHEEL_KAFKA_SSL_CERTIFICATE_LOCATION"],
        ),
    ],
)
def test_unsupported_or_inconsistent_settings_name_the_fix_never_the_password(
    config: dict[str, str], names: list[str]
) -> None:
    with pytest.raises(KafkaSecurityError) as raised:
        faust_credentials(config)
    assert isinstance(raised.value, FlywheelError)
    for name in names:
        assert name in str(raised.value)
    assert PASSWORD not in str(raised.value)
    with pytest.raises(KafkaSecurityError):
        aiokafka_kwargs(config)


def test_a_wrong_key_password_is_refused_without_quoting_it(pki: dict[str, Path]) -> None:
    wrong = "wrong-key-pw-Qm3"
    with pytest.raises(KafkaSecurityError) as raised:
        faust_credentials(
            {
                "security.protocol": "SSL",
                "ssl.certificate.location": str(pki["cert"]),
                "ssl.key.location": str(pki["key"]),
                "ssl.key.password": wrong,
            }
        )
    message = str(raised.value)
    assert "FLYWHEEL_KAFKA_SSL_KEY_PASSWORD" in message
    assert wrong not in message and KEY_PASSWORD not in message


def test_env_names_mirror_the_settings_pass_through() -> None:
    assert env_name("sasl.password") == "FLYWHEEL_KAFKA_SASL_PASSWORD"
    config = Settings.from_env({env_name("ssl.key.password"): "x"}).kafka_config
    assert config == {"ssl.key.password": "x"}
