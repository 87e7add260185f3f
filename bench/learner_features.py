"""Offline study: does the gate do better with feature-store features than with the context only?

Two arms over the same simulated fleet (same seed, so the same users, requests and outcome
draws): ``context`` (today's policy input) and ``features`` (context + point-in-time
``user.accept_rate_24h`` and ``user_language.accept_rate_24h``). Each version is trained on the
rewards the previous version served (tab@1 from the fleet's ground truth), checked off-policy
against it, and deployed if it passes. The features arm serves through ``ServingPolicy`` with an
``OnlineFeatureProvider`` over an ``OnlineFeatureStore`` fed chunk by chunk with the served
rewards (so serving lags by up to one chunk, like attribution delay), and trains on rows
enriched from a reward lake written with ``write_reward_lake`` (``historical_features`` at
decision time - 1 ms).

    .venv/bin/python -m bench.learner_features --versions 4 --requests 8000
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import numpy as np

from feature_store import OnlineFeatureStore, load_features
from learner.recipes.gate.features import (
    OnlineFeatureProvider,
    feature_columns,
    point_in_time_enrich,
)
from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.objective import GateObjective, ObjectiveConfig, fit_reward_model
from learner.recipes.gate.off_policy_check import (
    CheckedPolicy,
    OffPolicyCheck,
    OffPolicyCheckConfig,
)
from learner.recipes.gate.reward_rows import load_rows
from learner.recipes.gate.samples import RewardRows
from policies.gate_net import GateNetConfig, GatePolicyNet, ServingPolicy
from policies.policy import HeuristicPolicy
from schemas.events import Event, SuggestionOffered
from simulator import Fleet, SimulatorConfig, config_with_overrides
from tests.learner.recipes.gate.gate_offline import (
    ServedOutcome,
    fit_offline,
    simulate_rewards,
    write_reward_lake,
)

NAMES = ("user.accept_rate_24h", "user_language.accept_rate_24h")
CHUNK = 2000  # requests served between two feature-store updates


class _Arm:
    """One arm's fleet, lake and (for the features arm) online store."""

    def __init__(self, lake: Path, features: tuple[str, ...], seed: int, total: int) -> None:
        config = config_with_overrides(SimulatorConfig(), {"seed": seed})
        self.fleet = Fleet(config, HeuristicPolicy(), keep_requests=total)
        self.lake, self.features = lake, features
        self.store = OnlineFeatureStore(load_features(), history_ms=10**11)
        self.offers: dict[str, SuggestionOffered] = {}
        self.offset = 0
        step, flush = self.fleet.step, self.fleet.flush

        def record(events: list[Event]) -> list[Event]:
            for e in events:
                if isinstance(e, SuggestionOffered):
                    self.offers[e.suggestion_id] = e
            return events

        # Tap the offered events (user id, language per request) the study's lake rows need.
        self.fleet.step = lambda n_requests: record(step(n_requests))  # type: ignore[method-assign]
        self.fleet.flush = lambda: record(flush())  # type: ignore[method-assign]  # as above

    def serve(self, n: int) -> tuple[list[Path], ServedOutcome]:
        """Serve ``n`` requests in chunks; each chunk's rewards go to the lake and the store."""
        files, outcomes = [], []
        for start in range(0, n, CHUNK):
            rows, served = simulate_rewards(self.fleet, min(CHUNK, n - start))
            offers = [self.offers[s] for s in rows.source_id]
            users = [o.user_id for o in offers]
            langs = [o.language for o in offers]
            files.append(write_reward_lake(self.lake, rows, first_offset=self.offset,
                                           user_ids=users, languages=langs))  # fmt: skip
            self.offset += len(rows)
            self.store.ingest("rewards", _records(rows, users, langs))
            outcomes.append(served)
        return files, _sum(outcomes)


def _records(rows: RewardRows, users: list[str], langs: list[str]) -> list[dict[str, object]]:
    columns = (rows.event_time_ms, rows.shown, rows.reward, users, langs)
    return [
        {
            "event_time": int(t),
            "source": "SUGGESTION",
            "reward_fn": "tab@1",
            "decision": "SHOWN" if s else "SUPPRESSED",
            "reward_components": {"accepted": float(s and r > 0)},
            "reward": float(r),
            "user_id": u,
            "language": lang,
        }
        for t, s, r, u, lang in zip(*columns, strict=True)
    ]


def _sum(parts: list[ServedOutcome]) -> ServedOutcome:
    return ServedOutcome(
        requests=sum(p.requests for p in parts),
        shown=sum(p.shown for p in parts),
        accepted=sum(p.accepted for p in parts),
        reward_sum=sum(p.reward_sum for p in parts),
        expected_reward_sum=sum(p.expected_reward_sum for p in parts),
    )


def run_arm(features: tuple[str, ...], versions: int, requests: int, seed: int) -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        arm = _Arm(Path(tmp) / "lake", features, seed, (versions + 1) * requests)
        enrich = point_in_time_enrich(features, arm.lake) if features else None
        provider = OnlineFeatureProvider(arm.store, features) if features else None
        check = OffPolicyCheck(OffPolicyCheckConfig(resamples=500, min_effective_sample_size=100))
        split = HoldoutSplit()
        parent: CheckedPolicy = arm.fleet.policy
        net: GatePolicyNet | None = None
        for version in range(1, versions + 2):
            files, served = arm.serve(requests)
            lines.append(
                f"  served by v{getattr(arm.fleet.policy, 'version', 0)}: E[reward]/req "
                f"{served.expected_reward_per_request:.4f}  "
                f"realised {served.reward_per_request:.4f}"
                f"  shown/1000 {served.shown_per_1000:.0f}  accept {served.accept_rate:.3f}"
            )
            if version > versions:
                break
            rows = load_rows(arm.lake, files, reward_fn="tab@1", holdout=None, enrich=enrich)
            held = np.array([split.is_held_out(s) for s in rows.source_id])
            train, heldout = rows.take(~held), rows.take(held)
            if net is None:
                net = GatePolicyNet(GateNetConfig(extra_columns=feature_columns(features)))
                net.set_standardisation(train.features())
            reference = copy.deepcopy(net)
            task = GateObjective(fit_reward_model(train), ObjectiveConfig(), reference=reference)
            fit_offline(net, train, task, epochs=15, batch_rows=512, seed=version)
            candidate = ServingPolicy(net, "suggestion-gate", version, features=provider)
            decision = check.decide(candidate, parent, heldout)
            lines.append(f"  v{version}: check {'PASS' if decision.passed else 'FAIL'} — "
                         f"{decision.reason[:90]}")  # fmt: skip
            if decision.passed:
                arm.fleet.policy = parent = candidate
            else:
                net = reference
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for label, features in (("context only", ()), ("context + features", NAMES)):
        print(f"{label}:")
        for line in run_arm(features, args.versions, args.requests, args.seed):
            print(line, flush=True)


if __name__ == "__main__":
    main()
