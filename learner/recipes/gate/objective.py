"""The gate's off-policy training objective: doubly-robust policy gradient with a trust region.

Each Reward row is (x, logged action a, behaviour propensity μ(a|x), reward r). With a reward
model q̂(x, ·) (fitted on the training rows, :func:`fit_reward_model`) the per-row objective is

    value(x) = Σ_b π(b|x) q̂(x, b)  +  min(π(a|x) / μ(a|x), max_weight) · (r - q̂(x, a))
    loss(x)  = -value(x) + kl_coef · KL(π(·|x) || anchor(·|x))

The first term (direct method) moves the policy towards the action q̂ prefers on *every* row; the
second (truncated importance-weighted correction) removes q̂'s bias where the data says
otherwise. Why not a PPO ratio clip: with μ(suppress) = 0.05 almost every row is SHOWN, so a
1 ± 0.2 clip on π/μ would barely let the policy learn to suppress; the DR form learns from the
shown rows' outcomes through q̂ instead. The KL term is the trust region: its optimum is
``logit π = logit anchor + (q̂(show) - q̂(suppress)) / kl_coef`` (before the floor), so
``kl_coef`` sets how far one version moves from its anchor (the logged behaviour probabilities,
or a frozen ``reference`` network such as the warm-start parent). π includes the exploration
floor (see policies.gate_net), so weights are at most (1 - floor) / floor.

:class:`RewardModel` is generic over bounded rewards: per action, a logistic regression of the
reward rescaled to [0, 1] by the action's observed min and max (constant when they agree). For
``tab@1`` this is exactly q̂(show) = 0.75·p̂ - 0.25·(1 - p̂), p̂ = P(accept | x), and
q̂(suppress) = 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from learner.errors import LearnerError
from learner.recipes.gate.samples import RewardRows
from policies.gate_net import GatePolicyNet


@dataclass(frozen=True)
class ActionModel:
    """q̂(x, a) = low + (high - low) · sigmoid([z, 1] · weights) for standardised features z."""

    low: float
    high: float
    weights: np.ndarray  # (input_dim + 1,) float64; the last entry is the intercept
    rows: int  # training rows with this action


@dataclass(frozen=True)
class RewardModel:
    """q̂ for SHOWN and SUPPRESSED over standardised features (see the module docstring)."""

    mean: np.ndarray  # (input_dim,)
    scale: np.ndarray  # (input_dim,)
    show: ActionModel
    suppress: ActionModel

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(q̂(x, show), q̂(x, suppress)), each (n,) float64, for features (n, input_dim)."""
        z = _design((np.asarray(features, dtype=np.float64) - self.mean) / self.scale)
        return _action_value(self.show, z), _action_value(self.suppress, z)

    def predict_torch(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`predict` on a tensor (no gradient; same device and float32)."""
        device = features.device
        mean = torch.as_tensor(self.mean, dtype=torch.float32, device=device)
        scale = torch.as_tensor(self.scale, dtype=torch.float32, device=device)
        z = (features.float() - mean) / scale
        out = []
        for action in (self.show, self.suppress):
            w = torch.as_tensor(action.weights, dtype=torch.float32, device=device)
            p = torch.sigmoid(z @ w[:-1] + w[-1])
            out.append(action.low + (action.high - action.low) * p)
        return out[0], out[1]


def _design(z: np.ndarray) -> np.ndarray:
    return np.concatenate([z, np.ones((len(z), 1))], axis=1)


def _action_value(model: ActionModel, z: np.ndarray) -> np.ndarray:
    p = 1.0 / (1.0 + np.exp(-(z @ model.weights)))
    return np.asarray(model.low + (model.high - model.low) * p, dtype=np.float64)


def fit_reward_model(rows: RewardRows, *, l2: float = 1.0, iterations: int = 30) -> RewardModel:
    """Fit q̂ on ``rows`` (their ``features()``): per action a ridge logistic regression by
    Newton steps (``l2`` on the weights, not the intercept). An action without rows, or whose
    rows all have one reward, gets a constant (0 without rows). LearnerError for no rows."""
    if len(rows) == 0:
        raise LearnerError("fit_reward_model needs reward rows; the training data is empty.")
    x = rows.features().astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    scale = np.where(std > 1e-6, std, 1.0)
    z = _design((x - mean) / scale)
    show = _fit_action(z[rows.shown], rows.reward[rows.shown], l2, iterations)
    suppress = _fit_action(z[~rows.shown], rows.reward[~rows.shown], l2, iterations)
    return RewardModel(mean, scale, show, suppress)


def _fit_action(z: np.ndarray, reward: np.ndarray, l2: float, iterations: int) -> ActionModel:
    d = z.shape[1]
    if len(reward) == 0:
        return ActionModel(0.0, 0.0, np.zeros(d), 0)
    low, high = float(reward.min()), float(reward.max())
    if high - low < 1e-12:
        return ActionModel(low, low, np.zeros(d), len(reward))
    y = (reward - low) / (high - low)  # in [0, 1]: soft labels are fine for cross-entropy
    w = np.zeros(d)
    penalty = np.full(d, l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        gradient = z.T @ (y - p) - penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(d)
        step = np.linalg.solve(hessian, gradient)
        w += step
        if np.max(np.abs(step)) < 1e-8:
            break
    return ActionModel(low, high, w, len(reward))


@dataclass(frozen=True)
class ObjectiveConfig:
    """Knobs of :class:`GateObjective` (see the module docstring)."""

    kl_coef: float = 0.02  # trust region strength; smaller moves further per version
    max_weight: float = 10.0  # truncation of π(a|x) / μ(a|x) in the DR correction

    def __post_init__(self) -> None:
        if self.kl_coef < 0 or self.max_weight <= 0:
            raise LearnerError(
                f"objective kl_coef={self.kl_coef} must be >= 0 and max_weight="
                f"{self.max_weight} > 0; fix the learner config."
            )


class GateObjective:
    """Doubly-robust off-policy objective of the suggestion gate; implements
    learner.engine.microbatch.TrainingTask.

    Batches are :func:`learner.recipes.gate.samples.collate_rows` output: ``features``, ``shown``,
    ``propensity``, ``reward``. ``model`` is a :class:`GatePolicyNet`, possibly wrapped (DDP):
    its forward gives logits and ``.module`` or itself carries the config (floor).
    """

    def __init__(
        self,
        reward_model: RewardModel,
        config: ObjectiveConfig | None = None,
        *,
        reference: GatePolicyNet | None = None,
    ) -> None:
        self.reward_model = reward_model
        self.config = config or ObjectiveConfig()
        self.reference = None if reference is None else reference.eval()

    def loss(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        per_row = self.per_row_loss(model, batch)
        return per_row.sum(), torch.tensor(per_row.numel(), device=per_row.device)

    def per_row_loss(self, model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(rows,) float32: -value + kl_coef · KL for each row (see the module docstring)."""
        features = batch["features"]
        shown = batch["shown"].bool()
        propensity = batch["propensity"].float()
        reward = batch["reward"].float()
        floor = _floor_of(model)
        pi_show = floor + (1.0 - 2.0 * floor) * torch.sigmoid(model(features).float())
        q_show, q_suppress = self.reward_model.predict_torch(features)
        direct = pi_show * q_show + (1.0 - pi_show) * q_suppress
        pi_logged = torch.where(shown, pi_show, 1.0 - pi_show)
        weight = torch.clamp(pi_logged / propensity, max=self.config.max_weight)
        value = direct + weight * (reward - torch.where(shown, q_show, q_suppress))
        if self.config.kl_coef == 0:
            return -value
        anchor = self._anchor(features, shown, propensity)
        return -value + self.config.kl_coef * _bernoulli_kl(pi_show, anchor)

    def _anchor(
        self, features: torch.Tensor, shown: torch.Tensor, propensity: torch.Tensor
    ) -> torch.Tensor:
        if self.reference is None:
            return torch.where(shown, propensity, 1.0 - propensity)  # behaviour P(show | x)
        with torch.no_grad():
            ref = self.reference.to(features.device)
            return ref.show_probability(features).float()


def _floor_of(model: nn.Module) -> float:
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the net
    if not isinstance(inner, GatePolicyNet):
        raise LearnerError(
            f"GateObjective trains a GatePolicyNet, got {type(inner).__name__}; build the model "
            "with policies.gate_net.GatePolicyNet."
        )
    return inner.config.floor


def _bernoulli_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(p) || Bernoulli(q)) per element; both kept away from 0 and 1."""
    eps = 1e-6
    p = p.clamp(eps, 1 - eps)
    q = q.clamp(eps, 1 - eps)
    return p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))
