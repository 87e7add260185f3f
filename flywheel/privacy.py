"""One user's erasure across the platform: dead letters, lake, then the recorded event.

Order matters: the user's session and suggestion ids are read from the lake first (its
`telemetry.suggestions` rows hold them), the dead-letter topics are purged with them, the lake
is rewritten, and only then is `ErasureRecorded` produced on `privacy.erasures`, where feature
processors drop the user's online features and the sink records it in the lake. Each step is
idempotent, so after a failure the whole command is simply run again.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from flywheel import clients
from flywheel.settings import Settings
from processors.lake.dlq_erasure import DLQ_TOPICS, purge_dead_letters
from processors.lake.erasure import ErasureReport, erase_user, erasure_event, user_keys
from streams.topic_io import EventProducer
from streams.topics import ERASURES_TOPIC


def erase_everywhere(
    settings: Settings,
    user_id: str,
    *,
    dlq_topics: Sequence[str] = DLQ_TOPICS,
    erasures_topic: str = ERASURES_TOPIC,
) -> ErasureReport:
    """Erase `user_id` (a pseudonym) from the DLQ topics and the lake, then record it."""
    codec = clients.codec(settings)
    keys = user_keys(settings.lake, user_id)
    dead_letters = purge_dead_letters(
        settings.kafka_client_config(), keys, codec.decode, topics=dlq_topics
    )
    report = erase_user(settings.lake, user_id, keys=keys)
    report.dead_letters_removed = dead_letters
    event = erasure_event(report, producer=f"flywheel.privacy/{socket.gethostname()}")
    producer = EventProducer(settings.kafka_client_config())
    producer.send(erasures_topic, user_id, codec.encode(ERASURES_TOPIC, event.to_record()))
    producer.flush()
    return report
