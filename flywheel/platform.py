"""Bringing the platform's infrastructure up: the local stack (unless external) and topics."""

from __future__ import annotations

from collections.abc import Callable

from flywheel.clients import codec
from flywheel.settings import Settings
from streams.admin import TopicAdmin, TopicReport
from streams.stack.local import LocalStack
from streams.topics import ALL_TOPICS


def ensure_infrastructure(settings: Settings, say: Callable[[str], None]) -> TopicReport:
    """Start the local stack when no external cluster is configured, create the topics and
    register the event schemas (BACKWARD_TRANSITIVE per subject).

    Idempotent: a running stack is reused, existing topics are only checked for drift, and
    registering an unchanged schema is a no-op. Raises SchemaRegistryRequestError if a schema is
    refused.
    """
    if settings.uses_local_stack:
        LocalStack(settings.home, settings.ports, say).up()
    say("creating topics")
    report = TopicAdmin(settings.kafka_client_config()).ensure(ALL_TOPICS)
    say("registering schemas")
    codec(settings).register_all()
    return report
