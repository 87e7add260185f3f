"""The loopback ports of the embedded local stack (settings read them from FLYWHEEL_STACK_*)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StackPorts:
    """Loopback ports of the embedded local stack."""

    kafka: int = 9092
    controller: int = 9093
    registry: int = 8081
    s3: int = 9000
