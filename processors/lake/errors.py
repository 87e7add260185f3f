"""Errors the lake sink raises on purpose; each message says what was wrong and how to fix it."""

from ground.errors import FlywheelError


class LakeError(FlywheelError):
    """Base class of the lake sink's errors."""


class DeadLetterError(LakeError):
    """Dead letters could not be delivered to the DLQ topic, so the offsets they cover are not
    made durable (no file is renamed, nothing is committed); the sink stops and a restart
    replays them."""


class SinkConfigError(LakeError):
    """The sink was configured inconsistently (limits, topics, schemas)."""


class ErasureError(LakeError):
    """An erasure or retention request that cannot be carried out as asked."""


class MaintenanceLockError(LakeError):
    """The lake's maintenance lock stayed held by another process (a compaction, an erasure or
    retention) for longer than the caller would wait."""
