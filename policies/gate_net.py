"""The suggestion gate π(show | context) as a small network, and its serving wrapper.

:class:`GatePolicyNet` maps the context vector (plus optional extra feature columns) to the logit
of P(show): standardise with statistics stored in the model (buffers, so they travel with the
state_dict), then a linear term plus a small tanh hidden layer (logistic regression that can
bend). The *deployed* probability keeps the exploration floor inside the model:

    π(show | x) = floor + (1 - 2 floor) · sigmoid(logit(x))

so it lies in [floor, 1 - floor] exactly as ``simulator.policy.decide`` clips it: the training
objective sees the probabilities that will be logged, and its gradient never pushes a logit to
infinity for a decision the floor would override anyway.

Artifacts: ``save_policy`` writes ``policy.pt`` (state_dict, loaded with ``weights_only``) and
``policy.json`` (kind, context spec, shapes); ``load_policy`` rejects another spec or shape.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from policies.context import CONTEXT_DIM, CONTEXT_SPEC
from policies.errors import PolicyError
from policies.policy import RequestBatch

POLICY_KIND = "gate-mlp@1"
WEIGHTS_NAME = "policy.pt"
CONFIG_NAME = "policy.json"
DEFAULT_FLOOR = 0.05


class FeatureProvider(Protocol):
    """Serving-time values of a policy's extra columns (``learner.recipes.gate.features`` has the
    online feature-store one): the columns it yields, and the (n, len(columns)) float32 matrix of
    them for a batch of requests, as of now."""

    @property
    def columns(self) -> tuple[str, ...]: ...

    def __call__(self, batch: RequestBatch) -> np.ndarray: ...


@dataclass(frozen=True)
class GateNetConfig:
    """Shape of a gate network; stored beside its weights as ``policy.json``."""

    context_spec: str = CONTEXT_SPEC
    context_dim: int = CONTEXT_DIM
    extra_columns: tuple[str, ...] = ()
    hidden: int = 16
    floor: float = DEFAULT_FLOOR
    kind: str = POLICY_KIND

    @property
    def input_dim(self) -> int:
        return self.context_dim + len(self.extra_columns)

    def __post_init__(self) -> None:
        if self.context_dim < 1 or self.hidden < 0 or not 0.0 <= self.floor < 0.5:
            raise PolicyError(
                f"gate config context_dim={self.context_dim}, hidden={self.hidden}, "
                f"floor={self.floor}: need context_dim >= 1, hidden >= 0, floor in [0, 0.5)."
            )


class GatePolicyNet(nn.Module):
    """logit P(show) of a batch of feature rows: (n, input_dim) float32 → (n,) float32."""

    mean: torch.Tensor  # (input_dim,) buffer: feature means of the standardisation
    scale: torch.Tensor  # (input_dim,) buffer: feature standard deviations (1 when constant)
    hidden: nn.Linear | None
    out: nn.Linear | None

    def __init__(self, config: GateNetConfig | None = None, *, init_show: float = 0.9) -> None:
        """``init_show``: the deployed P(show) of a fresh network, the same for every context
        (start near the heuristic's behaviour, so the first version is a step away from it)."""
        super().__init__()
        self.config = config or GateNetConfig()
        d, h = self.config.input_dim, self.config.hidden
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("scale", torch.ones(d))
        self.linear = nn.Linear(d, 1)
        self.hidden = nn.Linear(d, h) if h else None
        self.out = nn.Linear(h, 1, bias=False) if h else None
        nn.init.zeros_(self.linear.weight)
        if self.out is not None:
            nn.init.zeros_(self.out.weight)  # zero output: the init is a flat init_show
        floor = self.config.floor
        inner = (min(max(init_show, floor + 1e-6), 1 - floor - 1e-6) - floor) / (1 - 2 * floor)
        nn.init.constant_(self.linear.bias, math.log(inner / (1 - inner)))

    def set_standardisation(self, features: np.ndarray) -> None:
        """Store mean and scale of ``features`` (n, input_dim); constant columns get scale 1."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.config.input_dim or len(x) == 0:
            raise PolicyError(
                f"standardisation needs (n >= 1, {self.config.input_dim}) features, got {x.shape}."
            )
        std = x.std(axis=0)
        self.mean.copy_(torch.from_numpy(x.mean(axis=0)).float())
        self.scale.copy_(torch.from_numpy(np.where(std > 1e-6, std, 1.0)).float())

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.mean) / self.scale
        logit = self.linear(z).squeeze(-1)
        if self.hidden is not None and self.out is not None:
            logit = logit + self.out(torch.tanh(self.hidden(z))).squeeze(-1)
        return torch.as_tensor(logit)

    def show_probability(self, features: torch.Tensor) -> torch.Tensor:
        """Deployed P(show): the floored sigmoid of the logit (see the module docstring)."""
        floor = self.config.floor
        return floor + (1.0 - 2.0 * floor) * torch.sigmoid(self.forward(features))


class ServingPolicy:
    """A trained gate behind ``policies.policy.Policy`` (requests) and ``FeatureScorer`` (feature
    rows): numpy forward, float32, no autograd."""

    def __init__(
        self,
        net: GatePolicyNet,
        name: str,
        version: int,
        *,
        features: FeatureProvider | None = None,
    ) -> None:
        """``features`` supplies the extra columns a net trained with them needs at serving
        (:meth:`show_probabilities`); PolicyError when its columns differ from the net's (a net
        without extra columns ignores it).
        Without one such a net still scores logged feature rows (:meth:`probabilities`, what the
        off-policy gate uses), but :meth:`show_probabilities` raises."""
        extra = net.config.extra_columns
        if features is not None and extra and tuple(features.columns) != extra:
            raise PolicyError(
                f"policy {name} v{version} was trained with extra columns "
                f"{net.config.extra_columns}, the feature provider gives {features.columns}; "
                "serve it with a provider of the same features, in the same order."
            )
        self._features = features if net.config.extra_columns else None
        self._name, self._version = name, version
        self.config = net.config
        state = {
            k: v.detach().cpu().numpy().astype(np.float32) for k, v in net.state_dict().items()
        }
        self._mean, self._scale = state["mean"], state["scale"]
        self._w, self._b = state["linear.weight"][0], float(state["linear.bias"][0])
        self._hidden: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if net.hidden is not None:
            hidden = state["hidden.weight"].T.copy(), state["hidden.bias"], state["out.weight"][0]
            self._hidden = hidden

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int:
        return self._version

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        """P(show) per request, in [floor, 1 - floor]; PolicyError for a wrong context width,
        or for a net with extra columns served without a feature provider."""
        x = np.asarray(batch.contexts, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.config.context_dim:
            raise PolicyError(
                f"contexts have shape {x.shape}, policy {self._name} v{self._version} expects "
                f"(n, {self.config.context_dim}) under {self.config.context_spec}."
            )
        if self.config.extra_columns:
            x = np.concatenate([x, self._extra(batch, len(x))], axis=1)
        return self.probabilities(x)

    def _extra(self, batch: RequestBatch, n: int) -> np.ndarray:
        if self._features is None:
            raise PolicyError(_needs_provider(self._name, self._version, self.config))
        extra = np.asarray(self._features(batch), dtype=np.float32)
        if extra.shape != (n, len(self.config.extra_columns)):
            raise PolicyError(
                f"the feature provider returned {extra.shape} for {n} requests; policy "
                f"{self._name} v{self._version} needs (n, {len(self.config.extra_columns)})."
            )
        return extra

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(show) of raw feature rows (n, input_dim), float64."""
        z = (features.astype(np.float32) - self._mean) / self._scale
        logit = z @ self._w + self._b
        if self._hidden is not None:
            weight, bias, out = self._hidden
            logit = logit + np.tanh(z @ weight + bias) @ out
        floor = self.config.floor
        sig = 1.0 / (1.0 + np.exp(-logit.astype(np.float64)))
        return np.asarray(floor + (1.0 - 2.0 * floor) * sig, dtype=np.float64)


def save_policy(net: GatePolicyNet, directory: Path) -> None:
    """Write ``policy.pt`` and ``policy.json`` of ``net`` into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu() for k, v in net.state_dict().items()}, directory / WEIGHTS_NAME)
    (directory / CONFIG_NAME).write_text(json.dumps(asdict(net.config), indent=1, sort_keys=True))


def load_net(
    directory: Path, *, context_spec: str = CONTEXT_SPEC, context_dim: int = CONTEXT_DIM
) -> GatePolicyNet:
    """The network saved in ``directory`` (e.g. to warm-start from it).

    Raises PolicyError when the files are missing or corrupt, or the policy was trained for
    another kind, context spec or context width than the caller serves.
    """
    try:
        raw: dict[str, Any] = json.loads((directory / CONFIG_NAME).read_text())
        config = GateNetConfig(**{**raw, "extra_columns": tuple(raw.get("extra_columns", ()))})
    except (OSError, ValueError, TypeError) as error:
        raise PolicyError(
            f"{directory / CONFIG_NAME} is missing or malformed ({error})."
        ) from error
    expected = (POLICY_KIND, context_spec, context_dim)
    if (config.kind, config.context_spec, config.context_dim) != expected:
        raise PolicyError(
            f"policy in {directory} is {config.kind} over {config.context_spec} with "
            f"{config.context_dim} features; this server needs {expected}. Retrain the policy "
            "on data of the served context spec."
        )
    net = GatePolicyNet(config)
    try:
        state = torch.load(directory / WEIGHTS_NAME, map_location="cpu", weights_only=True)
        net.load_state_dict(state)
    except (OSError, RuntimeError, KeyError, ValueError) as error:
        raise PolicyError(
            f"{directory / WEIGHTS_NAME} does not match its policy.json ({error}); the artifact "
            "is corrupt or was written by another kind of policy."
        ) from error
    return net.eval()


def load_policy(
    directory: Path,
    name: str,
    version: int,
    *,
    context_spec: str = CONTEXT_SPEC,
    context_dim: int = CONTEXT_DIM,
    features: FeatureProvider | None = None,
) -> ServingPolicy:
    """The serving policy saved in ``directory``; PolicyError as :func:`load_net`, and when the
    policy needs extra feature columns and ``features`` is None (or gives other columns)."""
    net = load_net(directory, context_spec=context_spec, context_dim=context_dim)
    if net.config.extra_columns and features is None:
        raise PolicyError(_needs_provider(name, version, net.config))
    return ServingPolicy(net, name, version, features=features)


def _needs_provider(name: str, version: int, config: GateNetConfig) -> str:
    return (
        f"policy {name} v{version} needs extra feature columns {config.extra_columns}, which a "
        "RequestBatch does not carry; serve it with a feature provider "
        "(learner.recipes.gate.features.OnlineFeatureProvider)."
    )
