"""GatePolicyNet, its serving wrapper and its artifact files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.errors import PolicyError
from policies.gate_net import (
    CONFIG_NAME,
    GateNetConfig,
    GatePolicyNet,
    ServingPolicy,
    load_net,
    load_policy,
    save_policy,
)
from policies.policy import RequestBatch
from schemas.enums import SuggestionTrigger
from simulator import Fleet, SimulatorConfig


def _batch(x: np.ndarray) -> RequestBatch:
    n = len(x)
    return RequestBatch(x, ("python",) * n, ("vscode",) * n, (SuggestionTrigger.AUTOMATIC,) * n)


def _trained_net(seed: int = 0) -> GatePolicyNet:
    torch.manual_seed(seed)
    net = GatePolicyNet(GateNetConfig(hidden=8))
    net.set_standardisation(np.random.default_rng(seed).normal(2.0, 3.0, size=(500, 10)))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return net.eval()


def test_a_fresh_net_shows_with_its_initial_probability_everywhere() -> None:
    net = GatePolicyNet(init_show=0.9)
    x = torch.randn(64, 10)
    np.testing.assert_allclose(net.show_probability(x).detach().numpy(), 0.9, rtol=1e-5)


def test_serving_matches_the_torch_forward_and_respects_the_floor() -> None:
    net = _trained_net()
    x = np.random.default_rng(1).normal(size=(256, 10)).astype(np.float32) * 5
    served = ServingPolicy(net, "suggestion-gate", 3).show_probabilities(_batch(x))
    expected = net.show_probability(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    assert served.min() >= 0.05 and served.max() <= 0.95


def test_save_and_load_round_trip_and_the_fleet_serves_it(tmp_path: Path) -> None:
    net = _trained_net(2)
    save_policy(net, tmp_path / "v3")
    policy = load_policy(tmp_path / "v3", "suggestion-gate", 3)
    x = np.random.default_rng(3).normal(size=(50, 10)).astype(np.float32)
    np.testing.assert_allclose(
        policy.show_probabilities(_batch(x)),
        ServingPolicy(net, "suggestion-gate", 3).show_probabilities(_batch(x)),
        rtol=1e-6,
    )
    fleet = Fleet(SimulatorConfig(), policy)
    fleet.step(500)
    assert fleet.ground_truth.by_version().keys() == {3}


def test_loading_refuses_another_context_spec_or_shape(tmp_path: Path) -> None:
    save_policy(_trained_net(), tmp_path / "p")
    with pytest.raises(PolicyError, match="context spec"):
        load_policy(tmp_path / "p", "g", 1, context_spec="other-context@2")
    with pytest.raises(PolicyError, match="features"):
        load_net(tmp_path / "p", context_dim=12)
    config = json.loads((tmp_path / "p" / CONFIG_NAME).read_text())
    (tmp_path / "p" / CONFIG_NAME).write_text(json.dumps({**config, "hidden": 4}))
    with pytest.raises(PolicyError, match="corrupt"):
        load_net(tmp_path / "p")
    with pytest.raises(PolicyError, match="missing"):
        load_net(tmp_path / "nothing")


def test_serving_rejects_a_batch_of_the_wrong_width() -> None:
    policy = ServingPolicy(_trained_net(), "g", 1)
    with pytest.raises(PolicyError, match="expects"):
        policy.show_probabilities(_batch(np.zeros((4, 7), dtype=np.float32)))
