"""Fixtures of the gate recipe's tests and benches: simulated reward rows, reward lake files,
a plain training loop.

These run the learning loop without Kafka: the simulator's fleet serves a policy, its ground
truth gives each request's ``tab@1`` reward (+0.75 accepted or partial, -0.25 rejected or
ignored, 0 suppressed: exactly what processors.rewards computes), and the offered events give
the logged context, decision and propensity. Tests (tests/learner) and benches
(bench/learner_features.py, bench/learner_mds.py) use them; nothing shipped does. The
production path is lake → :mod:`learner.recipes.gate.windows` → learner.engine.trainer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from contracts.arrow_schema import arrow_schema
from contracts.lake_layout import file_path, hour_of_ms
from learner.errors import LearnerError
from learner.recipes.gate.objective import GateObjective
from learner.recipes.gate.samples import RewardRows, rows_to_batch
from policies.gate_net import GatePolicyNet
from processors.lake.writer import write_parquet_atomically
from schemas.catalog import load_schema
from schemas.events import SuggestionOffered
from simulator import Fleet
from simulator.ground_truth import BREAK_EVEN, OutcomeCode
from streams.topics import REWARDS_TOPIC

TAB_REWARD_FN = "tab@1"


@dataclass(frozen=True)
class ServedOutcome:
    """Realised figures of a run of requests (the demo's per-version report)."""

    requests: int
    shown: int
    accepted: int
    reward_sum: float
    expected_reward_sum: float  # Σ over shown of P(accept) - 0.25: reward without outcome noise

    @property
    def shown_per_1000(self) -> float:
        return 1000.0 * self.shown / max(1, self.requests)

    @property
    def accept_rate(self) -> float:
        return self.accepted / max(1, self.shown)

    @property
    def reward_per_request(self) -> float:
        return self.reward_sum / max(1, self.requests)

    @property
    def expected_reward_per_request(self) -> float:
        return self.expected_reward_sum / max(1, self.requests)


def simulate_rewards(
    fleet: Fleet, n_requests: int, *, batch_size: int = 1024
) -> tuple[RewardRows, ServedOutcome]:
    """Serve ``n_requests`` more requests with ``fleet.policy``; their tab@1 reward rows (in
    request order) and outcome. The fleet must keep per-request ground truth for every request
    it has served (``Fleet(..., keep_requests=...)`` large enough), else LearnerError."""
    start = fleet.requests_done
    offers: dict[str, SuggestionOffered] = {}
    remaining = n_requests
    while remaining > 0:
        size = min(batch_size, remaining)
        _collect(fleet.step(size), offers)
        remaining -= size
    _collect(fleet.flush(), offers)
    table = fleet.ground_truth.table()
    if len(table.suggestion_ids) < start + n_requests:
        raise LearnerError(
            f"the fleet kept ground truth of {len(table.suggestion_ids)} requests, need "
            f"{start + n_requests}; build it with a larger keep_requests."
        )
    part = slice(start, start + n_requests)
    ids = table.suggestion_ids[part]
    logged = [offers[i] for i in ids]
    outcome, shown = table.outcome[part], table.shown[part]
    accepted = np.isin(outcome, (OutcomeCode.ACCEPTED, OutcomeCode.PARTIAL))
    rows = RewardRows(
        source_id=np.array(ids, dtype=object),
        context=np.array([o.context for o in logged], dtype=np.float32),
        shown=shown.copy(),
        propensity=table.propensity[part].copy(),
        reward=table.reward[part].copy(),
        model_version=table.model_version[part].copy(),
        event_time_ms=np.array([int(o.event_time.timestamp() * 1000) for o in logged]),
    )
    served = ServedOutcome(
        requests=n_requests,
        shown=int(shown.sum()),
        accepted=int(accepted.sum()),
        reward_sum=float(rows.reward.sum()),
        expected_reward_sum=float((table.p_accept[part] - BREAK_EVEN)[shown].sum()),
    )
    return rows, served


def _collect(events: Sequence[object], offers: dict[str, SuggestionOffered]) -> None:
    for event in events:
        if isinstance(event, SuggestionOffered):
            offers[event.suggestion_id] = event


def fit_offline(
    net: GatePolicyNet,
    rows: RewardRows,
    task: GateObjective,
    *,
    epochs: int = 20,
    batch_rows: int = 2048,
    lr: float = 0.01,
    seed: int = 0,
) -> GatePolicyNet:
    """Train ``net`` in place on ``rows`` with ``task`` (Adam, shuffled minibatches); a plain
    loop for tests and studies. Returns ``net`` in eval mode."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a net this small trains ~30x faster without intra-op threads
    try:
        return _fit(net, rows, task, epochs=epochs, batch_rows=batch_rows, lr=lr, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _fit(
    net: GatePolicyNet,
    rows: RewardRows,
    task: GateObjective,
    *,
    epochs: int,
    batch_rows: int,
    lr: float,
    seed: int,
) -> GatePolicyNet:
    generator = torch.Generator().manual_seed(seed)
    batch = rows_to_batch(rows)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    n = len(rows)
    net.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_rows):
            index = order[start : start + batch_rows]
            micro = {k: v[index] for k, v in batch.items()}
            total, count = task.loss(net, micro)
            optimizer.zero_grad()
            torch.autograd.backward(total / count)
            optimizer.step()
    return net.eval()


def write_reward_lake(
    lake: Path,
    rows: RewardRows,
    *,
    partition: int = 0,
    first_offset: int = 0,
    model_name: str = "suggestion-gate",
    reward_fn: str = TAB_REWARD_FN,
    topic: str = REWARDS_TOPIC,
    user_ids: Sequence[str | None] | None = None,
    languages: Sequence[str | None] | None = None,
) -> Path:
    """Write ``rows`` as ONE lake file of Reward records (offsets first_offset.., hour of the
    first row's event time) and return its path. For tests and benches of the lake readers.

    ``user_ids`` / ``languages`` (one per row) fill the Reward's entity columns (null without),
    so feature-store features can be computed over the file; ``reward_components`` has
    ``shown`` and ``accepted`` (reward > 0, as tab@1 pays only accepts)."""
    if len(rows) == 0:
        raise LearnerError("write_reward_lake needs at least one row.")
    schema = arrow_schema(load_schema("Reward"))
    n = len(rows)
    now = datetime.now(UTC)
    event_time = pa.array(rows.event_time_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    values: dict[str, pa.Array | list[object]] = {
        "event_id": [str(uuid.uuid4()) for _ in range(n)],
        "event_time": event_time,
        "producer": ["tests.learner.gate_offline/0"] * n,
        "reward_id": [f"{s}:{reward_fn}" for s in rows.source_id],
        "source": ["SUGGESTION"] * n,
        "source_id": list(rows.source_id),
        "model_name": [model_name] * n,
        "model_version": pa.array(rows.model_version, pa.int32()),
        "decision": np.where(rows.shown, "SHOWN", "SUPPRESSED").tolist(),
        "propensity": pa.array(rows.propensity, pa.float64()),
        "context": pa.array(list(rows.context), pa.list_(pa.field("item", pa.float32(), False))),
        "context_spec": ["sim-context@1"] * n,
        "reward": pa.array(rows.reward, pa.float64()),
        "reward_components": [
            [("shown", float(s)), ("accepted", float(s and r > 0))]
            for s, r in zip(rows.shown, rows.reward, strict=True)
        ],
        "user_id": list(user_ids) if user_ids is not None else [None] * n,
        "language": list(languages) if languages is not None else [None] * n,
        "reward_fn": [reward_fn] * n,
        "attributed_at": [now] * n,
        "_topic": [topic] * n,
        "_partition": pa.array([partition] * n, pa.int32()),
        "_offset": pa.array(np.arange(first_offset, first_offset + n), pa.int64()),
    }
    columns = [values.get(f.name, pa.nulls(n, f.type)) for f in schema]
    table = pa.Table.from_arrays(
        [
            pa.array(c, f.type) if not isinstance(c, pa.Array) else c.cast(f.type)
            for c, f in zip(columns, schema, strict=True)
        ],
        schema=schema,
    )
    last = first_offset + n - 1
    path = file_path(
        lake, topic, partition, first_offset, last, hour_of_ms(int(rows.event_time_ms[0]))
    )
    write_parquet_atomically(table, path)
    return path
