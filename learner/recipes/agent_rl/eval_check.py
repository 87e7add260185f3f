"""The agent's release check: a candidate against production on the eval suite, paired per task.

Both versions decode the same held-out tasks greedily (`learner.eval_suite`), so each task gives
one paired difference of pass (-1, 0, +1) and of reward. The eval check passes a candidate to the
canary only when

* its mean reward shows **no significant regression**: the bootstrap lower bound of the mean
  reward difference is above ``-tolerance``, and
* it is a **real improvement**: the lower bound of the pass@1 difference is above ``min_lift``
  (0: significantly better than production at the chosen confidence).

Tasks of one cluster (one program) are not independent: the bounds are a clustered bootstrap
(clusters resampled with replacement, ``learner.bootstrap.clustered_mean_lower``) over the eval
results' ``clusters``; their number is reported (``eval_clusters``). Every number goes into the
ModelVersionEvent's metrics (:meth:`EvalCheckDecision.metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learner.bootstrap import DEFAULT_BOOTSTRAP, DEFAULT_CONFIDENCE, clustered_mean_lower
from learner.errors import LearnerError
from learner.eval_suite import EvalResult


@dataclass(frozen=True)
class EvalCheckConfig:
    """The ``release_check`` section of the agent recipe (old name ``gate``)."""

    tolerance: float = 0.02  # reward regression allowed at the lower bound (rewards in [0, 1])
    min_lift: float = 0.0  # the pass@1 difference's lower bound must exceed this
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_BOOTSTRAP
    seed: int = 0


@dataclass(frozen=True)
class EvalCheckDecision:
    """The paired comparison and its verdict."""

    passed: bool
    reason: str
    tasks: int
    candidate_pass_at_1: float
    production_pass_at_1: float
    pass_lift: float
    pass_lift_lower: float
    candidate_reward: float
    production_reward: float
    reward_lift: float
    reward_lift_lower: float
    clusters: int  # independent units the bounds resample (tasks when none were given)

    def metrics(self) -> dict[str, float]:
        """For ``ModelVersionEvent.metrics`` (names prefixed ``eval_``)."""
        return {
            "eval_tasks": float(self.tasks),
            "eval_clusters": float(self.clusters),
            "eval_pass_at_1": self.candidate_pass_at_1,
            "eval_production_pass_at_1": self.production_pass_at_1,
            "eval_pass_lift": self.pass_lift,
            "eval_pass_lift_lower": self.pass_lift_lower,
            "eval_mean_reward": self.candidate_reward,
            "eval_production_mean_reward": self.production_reward,
            "eval_reward_lift_lower": self.reward_lift_lower,
        }


def eval_check(
    candidate: EvalResult, production: EvalResult, config: EvalCheckConfig
) -> EvalCheckDecision:
    """The eval check's verdict; LearnerError when the two were not evaluated on the same tasks
    (or name different clusters for them). Without clusters every task is its own."""
    if candidate.task_ids != production.task_ids or not candidate.task_ids:
        raise LearnerError("evaluate candidate and production on the same, non-empty tasks")
    pass_diff = candidate.passed.astype(np.float64) - production.passed.astype(np.float64)
    reward_diff = candidate.rewards - production.rewards
    named = candidate.clusters or production.clusters
    if named and (len(named) != len(pass_diff) or named != (production.clusters or named)):
        raise LearnerError("the two eval results name different clusters for the same tasks")
    clusters = np.asarray(named, dtype=object) if named else None
    units = len(set(named)) if named else len(pass_diff)

    def lower(diff: np.ndarray) -> float:
        return clustered_mean_lower(
            diff, clusters, confidence=config.confidence, resamples=config.resamples,
            seed=config.seed,
        )  # fmt: skip

    pass_lower, reward_lower = lower(pass_diff), lower(reward_diff)
    level = f"{config.confidence:.0%}"
    if reward_lower < -config.tolerance:
        passed, reason = (
            False,
            (
                f"mean reward may regress: lower bound of the lift {reward_lower:+.3f} < "
                f"-{config.tolerance:g} ({level}, {len(pass_diff)} held-out tasks in {units} "
                "clusters)"
            ),
        )
    elif pass_lower <= config.min_lift:
        passed, reason = (
            False,
            (
                f"no significant pass@1 improvement: lift {pass_diff.mean():+.3f}, lower bound "
                f"{pass_lower:+.3f} <= {config.min_lift:g} ({level}, {units} clusters)"
            ),
        )
    else:
        passed, reason = (
            True,
            (
                f"pass@1 {candidate.pass_at_1:.3f} vs {production.pass_at_1:.3f}, lift lower bound "
                f"{pass_lower:+.3f} ({level}, {units} clusters); reward lift lower bound "
                f"{reward_lower:+.3f}"
            ),
        )
    return EvalCheckDecision(
        passed, reason, len(pass_diff), candidate.pass_at_1, production.pass_at_1,
        float(pass_diff.mean()), pass_lower, candidate.mean_reward, production.mean_reward,
        float(reward_diff.mean()), reward_lower, units,
    )  # fmt: skip
