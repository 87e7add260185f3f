"""One user's erasure across the platform: dead letters, training windows, lake, then the event.

Order matters: the user's session, suggestion and completion ids are read from the lake first
(its `telemetry.suggestions`, `agent.completions` and `agent.feedback` rows hold them), the
dead-letter topics are purged with them, the MDS windows built from `rewards` files holding the
user's rows are dropped and those files rewritten (both under the datasets' locks, so no learner
rebuilds a window from them in between), then the rest of the lake is rewritten, and only then
is `ErasureRecorded` produced on `privacy.erasures`, where feature processors drop the user's
online features and the sink records it in the lake. Each step is idempotent, so after a failure
the whole command is simply run again.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Sequence
from pathlib import Path

from contracts.lake_layout import parse_file_name
from flywheel import clients
from flywheel.settings import Settings
from ground.store import Store
from learner.data.window_erasure import drop_windows, windows_locked
from learner.data.window_store import drop_published
from processors.lake.dlq_erasure import DLQ_TOPICS, purge_dead_letters
from processors.lake.erasure import (
    USER_TOPICS,
    ErasureReport,
    UserKeys,
    erase_user,
    erasure_event,
    user_files,
    user_keys,
)
from processors.lake.maintenance import maintenance_lock
from streams.topic_io import EventProducer
from streams.topics import ERASURES_TOPIC, REWARDS_TOPIC


def erase_everywhere(
    settings: Settings,
    user_id: str,
    *,
    dlq_topics: Sequence[str] = DLQ_TOPICS,
    erasures_topic: str = ERASURES_TOPIC,
) -> ErasureReport:
    """Erase `user_id` (a pseudonym) from the DLQ topics, the learner's MDS windows
    (`<home>/mds`) and the lake, then record it.

    The lake's maintenance lock is held from reading the user's ids to the last rewrite, so a
    compaction never replaces a file between the two (`processors.lake.maintenance`)."""
    codec = clients.codec(settings)
    lake = settings.lake_store()  # on disk or in an object store
    with maintenance_lock(lake):
        keys = user_keys(lake, user_id)
        dead_letters = purge_dead_letters(
            settings.kafka_client_config(), keys, codec.decode, topics=dlq_topics
        )
        report = ErasureReport(uuid.uuid4().hex, user_id, dead_letters_removed=dead_letters)
        erase_training_data(lake, settings.home / "mds", keys, report, settings.windows_store())
        others = [t for t in USER_TOPICS if t != REWARDS_TOPIC]
        erase_user(lake, user_id, keys=keys, topics=others, report=report)
    event = erasure_event(report, producer=f"flywheel.privacy/{socket.gethostname()}")
    producer = EventProducer(settings.kafka_client_config())
    producer.send(erasures_topic, user_id, codec.encode(ERASURES_TOPIC, event.to_record()))
    producer.flush()
    return report


def erase_training_data(
    lake: Path | Store,
    mds_root: Path,
    keys: UserKeys,
    report: ErasureReport,
    windows: Store | None = None,
) -> None:
    """Drop the MDS windows built from `rewards` lake files holding the user's rows (both
    recipes build windows from Reward files only; the agent's also hold the tokens of the
    completions those Rewards score), then rewrite those files, under every dataset's lock.
    Published windows (`windows`, FLYWHEEL_WINDOWS) go first: a learner adopts what the store
    lists, and drops what the store dropped (`learner.data.window_store`)."""
    with windows_locked(mds_root):
        held = (parse_file_name(p) for p in user_files(lake, REWARDS_TOPIC, keys))
        files = {(f.topic, f.partition, f.first, f.last) for f in held if f is not None}
        if windows is not None:
            published = drop_published(windows, files)
            report.windows_dropped += [f"{windows}/{name}" for name in published]
        report.windows_dropped += drop_windows(mds_root, files)
        erase_user(lake, keys.user_id, keys=keys, topics=[REWARDS_TOPIC], report=report)
