"""The doubly-robust off-policy objective and its reward model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from learner.engine.microbatch import TrainingTask
from learner.errors import LearnerError
from learner.recipes.gate.objective import GateObjective, ObjectiveConfig, fit_reward_model
from learner.recipes.gate.samples import RewardRows, rows_to_batch
from policies.gate_net import GatePolicyNet
from tests.learner.recipes.gate.gate_offline import fit_offline


def _logged(n: int, seed: int = 0) -> tuple[RewardRows, np.ndarray]:
    """v0-like data: shown with 0.95; P(accept) rises with context[0]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 10)).astype(np.float32)
    p_accept = 1 / (1 + np.exp(-(-1.2 + 1.5 * x[:, 0])))
    shown = rng.uniform(size=n) < 0.95
    accepted = rng.uniform(size=n) < p_accept
    rows = RewardRows(
        source_id=np.arange(n).astype(str).astype(object),
        context=x,
        shown=shown,
        propensity=np.where(shown, 0.95, 0.05),
        reward=np.where(shown, np.where(accepted, 0.75, -0.25), 0.0),
        model_version=np.zeros(n, dtype=np.int64),
        event_time_ms=np.zeros(n, dtype=np.int64),
    )
    return rows, p_accept


def test_reward_model_is_tab1_shaped_and_tracks_acceptance() -> None:
    rows, p_accept = _logged(6000)
    model = fit_reward_model(rows)
    q_show, q_suppress = model.predict(rows.context)
    np.testing.assert_allclose(q_suppress, 0.0)
    assert model.show.low == -0.25 and model.show.high == 0.75
    assert np.mean(np.abs(q_show - (p_accept - 0.25))) < 0.03
    torch_show, _ = model.predict_torch(torch.from_numpy(rows.context))
    np.testing.assert_allclose(torch_show.numpy(), q_show, atol=1e-5)


def test_loss_is_a_sum_over_rows_and_implements_the_task_protocol() -> None:
    rows, _ = _logged(300)
    task: TrainingTask = GateObjective(fit_reward_model(rows))
    net = GatePolicyNet()
    net.set_standardisation(rows.context)
    total, count = task.loss(net, rows_to_batch(rows))
    assert int(count) == 300 and total.shape == ()
    per_row = GateObjective(fit_reward_model(rows)).per_row_loss(net, rows_to_batch(rows))
    assert float(total.detach()) == pytest.approx(float(per_row.detach().sum()), rel=1e-5)
    torch.autograd.backward(total)
    assert net.linear.weight.grad is not None and net.linear.weight.grad.abs().sum() > 0


def test_training_learns_to_suppress_where_acceptance_is_low() -> None:
    rows, p_accept = _logged(4000, 1)
    net = GatePolicyNet()
    net.set_standardisation(rows.context)
    fit_offline(net, rows, GateObjective(fit_reward_model(rows)), epochs=5, batch_rows=256)
    pi = net.show_probability(torch.from_numpy(rows.context)).detach().numpy()
    assert pi[p_accept < 0.15].mean() < 0.3  # showing loses there: suppressed
    assert pi[p_accept > 0.4].mean() > 0.8  # showing pays there: kept


def test_the_kl_trust_region_limits_the_step() -> None:
    rows, p_accept = _logged(4000, 2)
    moved = []
    for kl_coef in (0.01, 1.0):
        net = GatePolicyNet(init_show=0.9)
        net.set_standardisation(rows.context)
        task = GateObjective(fit_reward_model(rows), ObjectiveConfig(kl_coef=kl_coef))
        fit_offline(net, rows, task, epochs=5, batch_rows=256)
        pi = net.show_probability(torch.from_numpy(rows.context)).detach().numpy()
        moved.append(float(np.abs(pi - 0.95)[p_accept < 0.15].mean()))
    assert moved[0] > 0.5 > 0.2 > moved[1]


def test_reference_anchor_and_validation() -> None:
    rows, _ = _logged(200, 3)
    reference = GatePolicyNet()
    reference.set_standardisation(rows.context)
    net = GatePolicyNet()
    net.load_state_dict(reference.state_dict())
    task = GateObjective(fit_reward_model(rows), reference=reference)
    total, _ = task.loss(net, rows_to_batch(rows))
    assert torch.isfinite(total)
    with pytest.raises(LearnerError, match="GatePolicyNet"):
        task.loss(nn.Linear(10, 1), rows_to_batch(rows))
    with pytest.raises(LearnerError):
        ObjectiveConfig(kl_coef=-1)
