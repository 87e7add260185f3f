"""Reward attribution (DESIGN §5): pure functions from telemetry events to ``Reward`` events.

``attribution`` joins a suggestion's offer, outcome, edits and test runs by event time;
``functions`` holds the named, versioned reward functions (``tab@1``, ``survival@1``,
``tests@1``); ``groups`` turns a group of agent trials into group-relative advantages. No
Kafka here: the faust adapter in ``processors/joiner/`` connects these to the topics.
"""

from processors.rewards.attribution import (
    REWARD_NAMESPACE,
    PendingSuggestion,
    Watermark,
    Windows,
    add,
    attribute,
    deadline_ms,
    is_late,
    rewards,
    suggestion_ids_of,
)
from processors.rewards.errors import RewardError
from processors.rewards.functions import (
    REWARD_FUNCTIONS,
    Attribution,
    RewardFunction,
    reward_functions,
)
from processors.rewards.groups import GroupPolicy, group_advantages, group_complete

__all__ = [
    "REWARD_FUNCTIONS",
    "REWARD_NAMESPACE",
    "Attribution",
    "GroupPolicy",
    "PendingSuggestion",
    "RewardError",
    "RewardFunction",
    "Watermark",
    "Windows",
    "add",
    "attribute",
    "deadline_ms",
    "group_advantages",
    "group_complete",
    "is_late",
    "reward_functions",
    "rewards",
    "suggestion_ids_of",
]
