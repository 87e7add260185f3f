"""Bringing the platform's infrastructure up: the local stack (unless external) and topics."""

from __future__ import annotations

from collections.abc import Callable

from flywheel.settings import Settings
from streams.admin import TopicAdmin, TopicReport
from streams.stack.local import LocalStack
from streams.topics import ALL_TOPICS


def ensure_infrastructure(settings: Settings, say: Callable[[str], None]) -> TopicReport:
    """Start the local stack when no external cluster is configured, then create the topics.

    Idempotent: a running stack is reused and existing topics are only checked for drift.
    """
    if settings.uses_local_stack:
        LocalStack(settings.home, settings.ports, say).up()
    say("creating topics")
    return TopicAdmin(settings.kafka_client_config()).ensure(ALL_TOPICS)
