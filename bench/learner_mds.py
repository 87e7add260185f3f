"""Benchmark: MDS window conversion rows/s, and the six-version offline learning study.

Conversion: reward rows are written to lake Parquet files; ``build_window`` (pyarrow read of the
needed columns, holdout hash, pack, MDSWriter, fsync, rename, manifest) converts them, and two
baselines run on the same files in the same round: a bare read → pack → ``MDSWriter`` pipeline
(what one would write by hand: no holdout, no durability, no manifest) and ``MDSWriter`` alone
writing pre-packed samples. One untimed warm-up round runs first; the order of build_window and
the bare pipeline alternates between rounds, and the page cache is synced (untimed) before each
timed phase: build_window fsyncs its window, and on ext4 that fsync would otherwise also flush
the pages the baselines left unwritten. Rows/s per round, then the median ratios (target
>= 0.5 of the bare pipeline; the machine is shared, so look at the ratios).

Study (``--study``): v0 is the heuristic (P(show) = 0.95). Each version trains on the requests
the previous version served (``--requests`` per version, 80 % of them: 1 in 5 is held out),
warm-started from its parent with the parent as trust-region anchor; the check compares it with its
parent on the held-out rows; it then serves. Every version (and a planted regression that
shows exactly what the candidate suppresses) is also evaluated on fresh, paired requests
(another seed) against the hidden P(accept): shown per 1,000, accept rate, expected reward.

    .venv/bin/python -m bench.learner_mds --rows 200000 --rounds 3
    .venv/bin/python -m bench.learner_mds --study --versions 6 --requests 8000
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.objective import GateObjective, ObjectiveConfig, fit_reward_model
from learner.recipes.gate.off_policy_check import OffPolicyCheck, OffPolicyCheckConfig
from learner.recipes.gate.samples import RewardRows, SampleSpec
from learner.recipes.gate.windows import build_window
from policies.gate_net import GatePolicyNet, ServingPolicy
from policies.policy import HeuristicPolicy, Policy
from simulator import Fleet, SimulatorConfig, config_with_overrides
from tests.learner.recipes.gate.gate_offline import fit_offline, simulate_rewards, write_reward_lake


def _synthetic_rows(n: int, seed: int) -> RewardRows:
    rng = np.random.default_rng(seed)
    shown = rng.uniform(size=n) < 0.9
    return RewardRows(
        source_id=np.array([str(uuid.UUID(int=int(i))) for i in rng.integers(2**62, size=n)]),
        context=rng.normal(size=(n, 10)).astype(np.float32),
        shown=shown,
        propensity=np.where(shown, 0.9, 0.1),
        reward=np.where(shown, np.where(rng.uniform(size=n) < 0.3, 0.75, -0.25), 0.0),
        model_version=np.zeros(n, dtype=np.int64),
        event_time_ms=1_736_154_000_000 + np.arange(n) * 10,
    )


def conversion_round(
    rows: RewardRows, files: int, compression: str | None, *, window_first: bool = True
) -> tuple[float, float, float]:
    """Rows/s of build_window, of a bare read-pack-write pipeline (pyarrow read of the same lake
    files, pack, MDSWriter: no holdout, no durability) and of MDSWriter alone (pre-packed)."""
    from streaming import MDSWriter

    spec = SampleSpec()
    with tempfile.TemporaryDirectory() as tmp:
        lake, mds = Path(tmp) / "lake", Path(tmp) / "mds"
        per = len(rows) // files
        paths = [
            write_reward_lake(
                lake, rows.take(np.arange(i * per, (i + 1) * per)), first_offset=i * per
            )
            for i in range(files)
        ]

        def window() -> float:
            os.sync()  # untimed: no phase pays for another's unwritten pages (see main)
            start = time.perf_counter()
            if build_window(lake, mds, "bench", "tab@1", compression=compression) is None:
                raise SystemExit("build_window found no files")
            return time.perf_counter() - start

        def pipeline() -> float:
            os.sync()
            start = time.perf_counter()
            read = _read_bare(paths)
            with MDSWriter(
                out=str(Path(tmp) / "raw"), columns=spec.columns(), compression=compression
            ) as w:
                for sample in spec.pack(read):
                    w.write(sample)
            return time.perf_counter() - start

        if window_first:
            window_s, pipeline_s = window(), pipeline()
        else:
            pipeline_s, window_s = pipeline(), window()

        samples = list(spec.pack(_read_bare(paths)))
        os.sync()
        start = time.perf_counter()
        with MDSWriter(
            out=str(Path(tmp) / "raw2"), columns=spec.columns(), compression=compression
        ) as w:
            for sample in samples:
                w.write(sample)
        raw_s = time.perf_counter() - start
    n = files * per
    return n / window_s, n / pipeline_s, n / raw_s


def _read_bare(paths: list[Path]) -> RewardRows:
    """The packed columns of ``paths`` read by hand: pyarrow, no filter, no ids, no holdout."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    columns = ["context", "decision", "propensity", "reward", "model_version"]
    table = pa.concat_tables([pq.read_table(p, columns=columns) for p in paths])
    n = table.num_rows
    return RewardRows(
        source_id=np.empty(n, dtype=object),
        context=pc.list_flatten(table["context"]).to_numpy().reshape(n, 10),
        shown=table["decision"].to_numpy(zero_copy_only=False) == "SHOWN",
        propensity=table["propensity"].to_numpy(),
        reward=table["reward"].to_numpy(),
        model_version=table["model_version"].to_numpy().astype(np.int64),
        event_time_ms=np.zeros(n, dtype=np.int64),
    )


def _evaluate(policy: Policy, n: int = 20_000) -> tuple[float, float, float]:
    fleet = Fleet(config_with_overrides(SimulatorConfig(), {"seed": 99}), policy, keep_requests=n)
    fleet.step(n)
    t = fleet.ground_truth.table()
    reward = float(np.where(t.shown, t.p_accept - 0.25, 0.0).mean())
    return 1000 * float(t.shown.mean()), float(t.p_accept[t.shown].mean()), reward


class _Inverted:
    def __init__(self, good: ServingPolicy) -> None:
        self.good = good

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        return 1.0 - self.good.probabilities(features)


def study(versions: int, requests: int, kl_coef: float, tolerance: float, seed: int) -> None:
    config = config_with_overrides(SimulatorConfig(), {"seed": seed})
    fleet = Fleet(config, HeuristicPolicy(), keep_requests=(versions + 1) * requests)
    check = OffPolicyCheck(
        OffPolicyCheckConfig(tolerance=tolerance, resamples=500, min_effective_sample_size=100)
    )
    split = HoldoutSplit()
    parent: Policy = fleet.policy
    net: GatePolicyNet | None = None
    v0 = _evaluate(parent)
    print(f"v0: shown/1000 {v0[0]:.0f}  accept {v0[1]:.3f}  E[reward]/req {v0[2]:.4f}")
    for version in range(1, versions + 1):
        rows, served = simulate_rewards(fleet, requests)
        held = np.array([split.is_held_out(s) for s in rows.source_id])
        train, heldout = rows.take(~held), rows.take(held)
        if net is None:
            net = GatePolicyNet()
            net.set_standardisation(train.features())
        production_net = copy.deepcopy(net)
        task = GateObjective(
            fit_reward_model(train), ObjectiveConfig(kl_coef=kl_coef), reference=production_net
        )
        fit_offline(net, train, task, epochs=15, batch_rows=512, seed=version)
        candidate = ServingPolicy(net, "suggestion-gate", version)
        decision = check.decide(candidate, parent, heldout)
        planted = check.decide(_Inverted(candidate), parent, heldout)
        shown, rate, reward = _evaluate(candidate)
        print(
            f"v{version}: trained on data of v{parent.version}: realised reward/req "
            f"{served.reward_per_request:.4f} | shown/1000 {shown:.0f} ({shown / v0[0] - 1:+.1%})"
            f"  accept {rate:.3f} ({rate / v0[1] - 1:+.1%})  E[reward]/req {reward:.4f} | check "
            f"{'PASS' if decision.passed else 'FAIL'} DR {decision.ope_dr_value:.4f} (lower "
            f"{decision.ope_dr_lower:.4f}) vs parent {decision.ope_baseline_value:.4f}, ESS "
            f"{decision.ope_effective_sample_size:.0f}/{len(heldout)} | planted worse: "
            f"{'PASS' if planted.passed else 'FAIL'} DR {planted.ope_dr_value:.4f}"
        )
        if decision.passed:
            fleet.policy = parent = candidate
        else:  # rejected: the next version warm-starts from production again
            net = production_net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", default=None)
    parser.add_argument("--study", action="store_true")
    parser.add_argument("--versions", type=int, default=6)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--kl-coef", type=float, default=0.02)
    parser.add_argument("--tolerance", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.study:
        study(args.versions, args.requests, args.kl_coef, args.tolerance, args.seed)
        return
    rows = _synthetic_rows(args.rows, 0)
    conversion_round(_synthetic_rows(10_000, 1), 2, args.compression)  # warm-up, not reported
    pipeline_ratios, raw_ratios = [], []
    for r in range(args.rounds):
        window, pipeline, raw = conversion_round(
            rows, args.files, args.compression, window_first=r % 2 == 0
        )
        pipeline_ratios.append(window / pipeline)
        raw_ratios.append(window / raw)
        print(
            f"round {r}: build_window {window:,.0f} rows/s | bare read+pack+write {pipeline:,.0f}"
            f" rows/s (ratio {window / pipeline:.2f}) | MDSWriter alone {raw:,.0f} rows/s "
            f"(ratio {window / raw:.2f})",
            flush=True,
        )
    print(
        f"median of {args.rounds} rounds: build_window / bare read+pack+write "
        f"{np.median(pipeline_ratios):.2f} (target >= 0.5) | build_window / MDSWriter alone "
        f"{np.median(raw_ratios):.2f}"
    )


if __name__ == "__main__":
    main()
