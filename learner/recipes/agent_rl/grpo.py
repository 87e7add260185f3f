"""The agent recipe's objective: a GRPO-family policy gradient on completion tokens.

Notation per completion token t of a trial with group-relative advantage A (from the joiner's
``grpo@1`` Rewards): μ_t the behaviour log-prob recorded by the rollout worker (the distribution
the token was drawn from: logits / temperature, then the top-p nucleus), π_t the trained
policy's under the same distribution (each row carries its trial's temperature and top_p, and
π applies both, so on-policy rho is exactly 1), rho_t = exp(π_t - μ_t).

* **Greedy rows are not samples.** A row served at temperature 0 (greedy, speculative edits
  included) was chosen by argmax: its tokens had behaviour probability 1, not the recorded
  softmax value, so π/μ is no importance ratio, and they are the policy's mode rather than draws
  from it, so a policy gradient on them is biased towards what the model already prefers. Such
  rows weigh 0 here (the windows already leave them out, counted as ``greedy_rows``; this also
  covers older windows).

* **Ratio against the behaviour policy.** rho is taken against μ from the rollout itself, never a
  recomputed "old" policy: the trials were produced by versions the registry served, possibly a
  few versions back, in another process and numeric path.
* **Clip** (PPO): s_t = min(rho_t A, clip(rho_t, 1 - ε_low, 1 + ε_high) A).
* **Truncated importance sampling** (TIS) for the train/inference mismatch and stale trials:
  the clip bounds rho only where it would raise the objective; for A < 0 a token the policy now
  likes far more than the sampler did has an unbounded rho A. Its importance weight is truncated at
  C: s_t = max(s_t, C A) (as a dual clip), so no token weighs more than C.
* **KL to the reference** (optional, ``kl_coef`` > 0): the k3 estimator exp(r - π) - (r - π) - 1
  per token against the reference (warm-start) policy r.
* **Normalisation** (``normalisation``): ``token`` (default), as in DAPO: the loss is the sum
  over every completion token of the batch divided by their number, so each token weighs the
  same whatever its completion's length (a per-sequence mean, GRPO's original, favours short
  wrong answers and long right ones). ``sequence``: GRPO's per-sequence mean, each trial
  weighing the same. In multi-turn episodes the failures are the long ones (they loop until the
  context or turn limit), so token-level lets a group's failures outweigh its one success by
  their length; per-sequence keeps a group's positive and negative advantages in balance.
  Advantages come normalised by the group's std from the joiner.

``loss`` returns (Σ losses, units): the trainer's step divides by the global batch's units
(completion tokens, or trials under ``sequence``), so ``tok`` durations count those units.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from learner.engine.causal_lm import next_token_logprobs
from learner.errors import LearnerError


@dataclass(frozen=True)
class GRPOConfig:
    """The ``objective`` section of the agent recipe."""

    clip_low: float = 0.2  # ε_low
    clip_high: float = 0.28  # ε_high (DAPO's clip-higher keeps exploration alive)
    tis_cap: float = 2.0  # C: most any token's importance weight counts
    kl_coef: float = 0.0  # β of the k3 KL to the reference; 0: no reference forward pass
    normalisation: Literal["token", "sequence"] = "token"  # what each unit of the mean is

    def __post_init__(self) -> None:
        if not (0 < self.clip_low < 1 and self.clip_high > 0 and self.tis_cap > 1):
            raise LearnerError(
                f"objective needs 0 < clip_low < 1, clip_high > 0, tis_cap > 1: {self}"
            )
        if self.kl_coef < 0:
            raise LearnerError("objective.kl_coef must be >= 0")
        if self.normalisation not in ("token", "sequence"):
            raise LearnerError(
                f"objective.normalisation must be 'token' or 'sequence', not {self.normalisation!r}"
            )


def token_losses(
    logprobs: torch.Tensor,
    behaviour: torch.Tensor,
    advantage: torch.Tensor,
    config: GRPOConfig,
    reference: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token loss (negated surrogate, plus β·KL): all arguments (B, T) except ``advantage``
    (B,) broadcast over the tokens. Pure: the unit tests compute it by hand."""
    a = advantage.unsqueeze(-1)
    ratio = torch.exp(logprobs - behaviour)
    clipped = torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    surrogate = torch.minimum(ratio * a, clipped * a)
    surrogate = torch.where(a < 0, torch.maximum(surrogate, config.tis_cap * a), surrogate)
    loss = -surrogate
    if reference is not None and config.kl_coef > 0:
        delta = reference - logprobs
        loss = loss + config.kl_coef * (torch.exp(delta) - delta - 1.0)
    return loss


class GRPOTask:
    """The agent recipe's `TrainingTask` over agent token windows: columns ``input_ids``,
    ``target`` (completion tokens), ``lengths``, ``behaviour`` (μ at each target position),
    ``temperature`` and ``top_p`` (the trial's sampling parameters; a window without ``top_p``
    reads as 1, no filter), ``advantage``, ``weight`` (per row; 0 for padding rows) and, with
    ``fresh_versions``, ``version``: rows sampled by any other version (older than the
    staleness bound, or never production: a refused or rolled-back canary) weigh 0. Rows at
    temperature 0 (greedy) weigh 0 (module docstring).

    ``reference`` (the KL's policy) follows the trained model's device: it is moved there on
    the first loss on a device (the trainer moves the model it builds, never the task's
    modules)."""

    def __init__(
        self,
        config: GRPOConfig,
        reference: nn.Module | None = None,
        fresh_versions: Collection[int] | None = None,
    ) -> None:
        self.config = config
        self.reference = reference
        self.fresh_versions = None if fresh_versions is None else sorted(set(fresh_versions))
        self._reference_device: torch.device | None = None

    def loss(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, lengths = batch["input_ids"].long(), batch["lengths"]
        weight = batch["weight"].float()
        if self.fresh_versions is not None:
            fresh = torch.tensor(self.fresh_versions, device=batch["version"].device)
            weight = weight * torch.isin(batch["version"], fresh.to(batch["version"].dtype))
        temperature = batch["temperature"].float()
        sampled = temperature > 0  # greedy rows (and padding rows, all zeros) are no samples
        weight = weight * sampled
        temperature = torch.where(sampled, temperature, torch.ones_like(temperature))
        top_p = batch.get("top_p")
        if top_p is not None:  # float64: the nucleus threshold as the sampler computed it
            top_p = torch.where(top_p > 0, top_p.double(), torch.ones_like(top_p.double()))
        logprobs = next_token_logprobs(model, input_ids, lengths, temperature, top_p=top_p)
        target = batch["target"][:, 1:].bool() & (weight > 0).unsqueeze(-1)
        reference = None
        if self.reference is not None and self.config.kl_coef > 0:
            policy = self._reference_on(_device_of(model))
            with torch.no_grad():
                reference = next_token_logprobs(policy, input_ids, lengths, temperature,
                                                top_p=top_p)  # fmt: skip
        losses = token_losses(
            logprobs, batch["behaviour"][:, 1:].float(), batch["advantage"].float(),
            self.config, reference,
        )  # fmt: skip
        weighted = torch.where(target, losses * weight.unsqueeze(-1), torch.zeros_like(losses))
        if self.config.normalisation == "sequence":  # each trial's mean over its tokens
            tokens = target.sum(dim=1)
            trained = tokens > 0
            per_trial = weighted.sum(dim=1) / tokens.clamp(min=1)
            return per_trial[trained].sum(), trained.sum()
        return weighted.sum(), target.sum()

    def _reference_on(self, device: torch.device) -> nn.Module:
        """The reference policy, moved to ``device`` once (the trained model's)."""
        if self.reference is None:
            raise LearnerError("GRPOTask has no reference policy; pass one for kl_coef > 0")
        if self._reference_device != device:
            self.reference = self.reference.to(device)
            self._reference_device = device
        return self.reference


def _device_of(model: nn.Module) -> torch.device:
    """Where ``model`` (or the module DDP wraps) keeps its parameters."""
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


@dataclass(frozen=True)
class TrialFilter:
    """Which trials a cycle trains on: the staleness bound and group filtering."""

    max_staleness: int = 2  # trials more than this many versions behind production are dropped

    def keep(
        self, versions: np.ndarray, groups: np.ndarray, advantages: np.ndarray, production: int
    ) -> tuple[np.ndarray, dict[str, int]]:
        """(n,) bool of trials to train on, and counts of what was dropped and why:
        ``stale`` (production - version > max_staleness) and ``flat_group`` (every trial of the
        group has the same advantage, 0 after normalisation: no signal to learn from)."""
        stale = (production - versions) > self.max_staleness
        flat = np.zeros(len(groups), dtype=bool)
        for group in np.unique(groups):
            members = groups == group
            values = advantages[members]
            flat[members] = bool(np.all(values == values[0]))
        keep = ~stale & ~flat
        return keep, {"stale": int(stale.sum()), "flat_group": int((flat & ~stale).sum())}
