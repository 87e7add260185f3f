"""What a joiner worker is wired to (topics, store, guarantee, batching), declared once: the
faust adapter (`processors.joiner.app`) takes it, and `flywheel process` takes its option
defaults from it. No faust import here, so the CLI's `--help` stays fast."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from streams.topics import (
    COMPLETION_TOPICS,
    REWARDS_TOPIC,
    ROLLOUTS_TOPIC,
    TELEMETRY_PARTITIONS,
    TELEMETRY_TOPICS,
    dlq_topic,
)

# Source topic → the platform topic whose schema decodes it (identity in production; tests and
# mirrors read copies under other names).
TELEMETRY_SOURCES: Mapping[str, str] = {t: t for t in TELEMETRY_TOPICS}
# The served completions and their feedback (the completion join), likewise.
COMPLETION_SOURCES: Mapping[str, str] = {t: t for t in COMPLETION_TOPICS}


@dataclass(frozen=True)
class JoinerConfig:
    """Everything `build_app` needs besides the reward logic's parameters."""

    topics: Mapping[str, str] = field(default_factory=lambda: dict(TELEMETRY_SOURCES))
    completion_topics: Mapping[str, str] = field(default_factory=lambda: dict(COMPLETION_SOURCES))
    rollouts_topic: str = ROLLOUTS_TOPIC
    rewards_topic: str = REWARDS_TOPIC
    dlq_late: str = dlq_topic("late")
    dlq_joiner: str = dlq_topic("joiner")
    store: str = "memory://"
    partitions: int = TELEMETRY_PARTITIONS
    processing_guarantee: str = "exactly_once"  # or "at_least_once" (docs/processors.md)
    session_timeout_s: float = 60.0  # a crashed worker's partitions are reassigned after this
    producer: str = field(default_factory=lambda: f"joiner/{socket.gethostname()}")
    batch_size: int = 2000  # records per joiner batch: state is written once per key per batch
    batch_within_s: float = 0.05  # a partial batch is processed after this long
    producer_linger_s: float = 0.005  # batches changelog and reward records into fewer requests
    idle_s: float = 2.0  # a caught-up input quiet this long stops holding back attribution
    datadir: str = "{conf.name}-data"  # faust's local folder (`{conf.name}`: the app id); its
    # parent must exist
