"""`flywheel serve`'s app against a stand-in replica: decide, batches, 400s, health, metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from fleet.serving_app import create_app
from fleet.subscriber import Routed, ServedModel, ServingSnapshot
from flywheel.commands.serve import serve, status_line
from policies.context import CONTEXT_DIM
from policies.policy import HeuristicPolicy, RequestBatch
from schemas.enums import Channel

CONTEXT = [0.1] * CONTEXT_DIM


@dataclass
class SumPolicy:
    """A 'trained' policy over a 3-wide context: P(show) = clip(sum(context), 0, 1)."""

    name: str = "gate"
    version: int = 3
    config: Any = field(
        default_factory=lambda: SimpleNamespace(context_spec="toy@1", context_dim=3)
    )
    calls: int = 0

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        self.calls += 1
        if batch.user_ids and batch.user_ids[0] == "boom":
            raise RuntimeError("model exploded")
        return np.asarray(np.clip(batch.contexts.sum(axis=1), 0.0, 1.0), dtype=np.float64)


class FakeReplica:
    """The attributes the app reads from a ModelSubscriber; users starting with 'c' are canary."""

    model_name = "gate"
    replica_id = "replica-t"
    rejected = 0

    def __init__(self) -> None:
        self.fallback = HeuristicPolicy(name="gate", show_probability=0.95)
        self.snapshot: ServingSnapshot[Any] = ServingSnapshot()

    @property
    def serving_version(self) -> int:
        production = self.snapshot.production
        return production.version if production else 0

    def serve(self, production: Any, canary: Any = None, fraction: float = 0.1) -> None:
        self.snapshot = ServingSnapshot(
            ServedModel(Channel.PRODUCTION, production.version, production, "a" * 64, 1.0),
            ServedModel(Channel.CANARY, canary.version, canary, "b" * 64, fraction)
            if canary
            else None,
        )

    def route(self, user_id: str) -> Routed[Any]:
        canary, production = self.snapshot.canary, self.snapshot.production
        if canary is not None and user_id.startswith("c"):
            return Routed(Channel.CANARY, canary.version, canary.model)
        if production is not None:
            return Routed(Channel.PRODUCTION, production.version, production.model)
        return Routed(Channel.PRODUCTION, 0, self.fallback)


@pytest.fixture
def replica() -> FakeReplica:
    return FakeReplica()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` in an exposition, or None."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def client(replica: FakeReplica, **kwargs: Any) -> TestClient:
    return TestClient(create_app(replica, **kwargs))


def test_decide_serves_the_fallback_then_production_and_canary(replica: FakeReplica) -> None:
    c = client(replica)
    answer = c.post("/v1/decide", json={"user_id": "u1", "context": CONTEXT})
    assert answer.status_code == 200
    assert answer.json() == {
        "show_probability": 0.95, "model": "gate", "version": 0, "channel": "production",
    }  # fmt: skip

    production, canary = SumPolicy(version=3), SumPolicy(version=4)
    replica.serve(production, canary)
    batch = [
        {"user_id": "u1", "context": [0.1, 0.2, 0.3], "context_spec": "toy@1"},
        {"user_id": "c7", "context": [0.5, 0.5, 0.5]},
        {"user_id": "u2", "context": [0, 0, 0.25], "trigger": "INVOKED", "language": "python"},
    ]
    results = c.post("/v1/decide", json=batch).json()
    assert [(r["version"], r["channel"]) for r in results] == [
        (3, "production"), (4, "canary"), (3, "production"),
    ]  # fmt: skip
    assert [r["show_probability"] for r in results] == pytest.approx([0.6, 1.0, 0.25])
    assert (production.calls, canary.calls) == (1, 1)  # one policy call per routed policy
    assert c.post("/v1/decide", json=[]).json() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"context": CONTEXT}, "request.user_id"),
        ({"user_id": "", "context": CONTEXT}, "request.user_id"),
        ({"user_id": "u", "context": "0.1,0.2"}, "request.context"),
        ({"user_id": "u", "context": [0.1, True]}, "request.context"),
        ({"user_id": "u", "context": [0.1] * 3}, "request.context"),  # the fallback takes 10
        ({"user_id": "u", "context": CONTEXT, "context_spec": "other@2"}, "request.context_spec"),
        ({"user_id": "u", "context": CONTEXT, "trigger": "SOMETIMES"}, "request.trigger"),
        ({"user_id": "u", "context": CONTEXT, "ide": 3}, "request.ide"),
        ([{"user_id": "u", "context": CONTEXT}, {"user_id": "v"}], "requests[1].context"),
        ([{"user_id": "u", "context": CONTEXT}, 7], "requests[1]"),
        ("just a string", "request"),
    ],
)
def test_bad_requests_get_400_naming_the_field(replica: FakeReplica, body: Any, field: str) -> None:
    answer = client(replica).post("/v1/decide", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(field)


def test_bad_bodies_get_400_or_413_and_a_failing_policy_500(replica: FakeReplica) -> None:
    c = client(replica, max_batch=2, max_body_bytes=2000)
    assert c.post("/v1/decide", content=b"{not json").status_code == 400
    assert c.post("/v1/decide", content=b"x" * 3000).status_code == 413
    many = [{"user_id": "u", "context": CONTEXT}] * 3
    assert c.post("/v1/decide", json=many).status_code == 413
    nan = b'{"user_id": "u", "context": [NaN, 0, 0, 0, 0, 0, 0, 0, 0, 0]}'
    assert "finite" in c.post("/v1/decide", content=nan).json()["error"]
    replica.serve(SumPolicy())
    failed = c.post("/v1/decide", json={"user_id": "boom", "context": [0, 0, 0]})
    assert failed.status_code == 500 and "model exploded" in failed.json()["error"]
    ok = c.post("/v1/decide", json={"user_id": "u", "context": [0, 0, 0.5]})
    assert ok.status_code == 200  # still serving after the failure
    assert c.get("/v1/decide").status_code == 405


def test_models_and_health_report_the_snapshot(replica: FakeReplica) -> None:
    ready = {"now": False}
    c = client(replica, ready=lambda: ready["now"])
    starting = c.get("/healthz")
    assert starting.status_code == 503 and starting.json()["status"] == "starting"
    assert starting.json()["production"] == {
        "version": 0,
        "artifact_sha256": None,
        "fallback": True,
    }
    ready["now"] = True
    assert c.get("/healthz").status_code == 200
    replica.serve(SumPolicy(version=3), SumPolicy(version=4), fraction=0.25)
    models = c.get("/v1/models").json()
    assert models["production"]["version"] == 3 and not models["production"]["fallback"]
    assert models["canary"] == {"version": 4, "artifact_sha256": "b" * 64, "traffic_fraction": 0.25}
    assert models["replica_id"] == "replica-t"


def test_metrics_show_versions_requests_and_decisions(replica: FakeReplica) -> None:
    c = client(replica)
    replica.serve(SumPolicy(version=3), SumPolicy(version=4))
    c.post("/v1/decide", json=[{"user_id": "u", "context": [0, 0, 0]}] * 2)
    c.post("/v1/decide", json={"user_id": "u"})
    c.get("/nowhere")
    text = c.get("/metrics").text
    ids = {"service": "serving", "replica": "replica-t", "model": "gate"}
    assert sample(text, "flywheel_model_version", **ids, channel="production") == 3
    assert sample(text, "flywheel_model_version", **ids, channel="canary") == 4
    requests = "flywheel_serving_requests_total"
    assert sample(text, requests, route="/v1/decide", status="200") == 1
    assert sample(text, requests, route="/v1/decide", status="400") == 1
    assert sample(text, requests, route="other", status="404") == 1
    decisions = "flywheel_serving_decisions_total"
    assert sample(text, decisions, channel="production", model="gate", version="3") == 2
    assert c.app.state.metrics.decisions == 2  # type: ignore[attr-defined]


def test_status_line_and_help(replica: FakeReplica) -> None:
    replica.serve(SumPolicy(version=3), SumPolicy(version=4), fraction=0.1)
    line = status_line(replica, 1234, 12.5)  # type: ignore[arg-type]
    assert line == "serving gate v3 (canary v4 at 10%), 12.5 decisions/s, 1,234 total"
    fallback = status_line(FakeReplica(), 0, 0.0)  # type: ignore[arg-type]
    assert fallback.startswith("serving gate v0 (fallback)")
    result = CliRunner().invoke(serve, ["--help"])
    assert result.exit_code == 0 and "/v1/decide" in result.output
