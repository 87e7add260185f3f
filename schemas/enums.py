"""Python mirrors of the Avro enums in ``schemas/avro/`` (one class per Avro enum name).

Each member's value is its Avro symbol, so a member can be written to fastavro as is and read
back with ``Decision(symbol)``. ``tests/schemas`` checks the symbols against the ``.avsc`` files.
Values are spelled out (not ``auto()``, which would lower-case them).
"""

from enum import StrEnum


class Decision(StrEnum):
    """The behaviour policy's decision for one suggestion."""

    SHOWN = "SHOWN"
    SUPPRESSED = "SUPPRESSED"


class SuggestionTrigger(StrEnum):
    """What started a suggestion request: typing, or an explicit user command."""

    AUTOMATIC = "AUTOMATIC"
    INVOKED = "INVOKED"


class Outcome(StrEnum):
    """The user's decision on a shown suggestion (PARTIAL: a prefix was accepted)."""

    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"
    PARTIAL = "PARTIAL"


class RewardSource(StrEnum):
    """What a reward is for."""

    SUGGESTION = "SUGGESTION"
    ROLLOUT = "ROLLOUT"
    COMPLETION = "COMPLETION"


class AgentReaction(StrEnum):
    """A user's reaction to a completion the agent model served."""

    ACCEPTED = "ACCEPTED"
    EDIT_PERSISTED = "EDIT_PERSISTED"
    REVERTED = "REVERTED"
    DISSATISFIED_FOLLOWUP = "DISSATISFIED_FOLLOWUP"
    TESTS_PASSED = "TESTS_PASSED"
    TESTS_FAILED = "TESTS_FAILED"


class ModelEventType(StrEnum):
    """A step in a model version's life."""

    REGISTERED = "REGISTERED"
    GATE_PASSED = "GATE_PASSED"
    GATE_FAILED = "GATE_FAILED"
    CANARY_STARTED = "CANARY_STARTED"
    PROMOTED = "PROMOTED"
    ROLLED_BACK = "ROLLED_BACK"


class Channel(StrEnum):
    """A serving channel of a model. Topic keys spell it in lower case (``str.lower()``)."""

    CANDIDATE = "CANDIDATE"
    CANARY = "CANARY"
    PRODUCTION = "PRODUCTION"


class ReplicaState(StrEnum):
    """A serving replica's progress on one version."""

    LOADING = "LOADING"
    READY = "READY"
    REJECTED = "REJECTED"
