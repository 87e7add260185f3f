"""End to end: a shortened closed loop on the real local stack.

`flywheel demo` runs the fleet, joiner, lake sink and learner until two versions are decided; the
test then checks that a version was trained, checked, published and served by the simulated
fleet, and that the lake, the catalog, the registry and the report all reflect it. As `make
demo` does by default, the lake and the training windows are in the stack's S3 store: the sink
writes there, the learner mirrors the lake and publishes and streams its windows.
"""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from analytics import connect, query
from flywheel.cli import cli
from flywheel.clients import codec
from flywheel.demo.results import RESULTS_FILE, RunResults
from flywheel.settings import Settings
from ground.store import Store
from learner.data.window_store import read_published_manifest
from model_registry.registry import ModelRegistry
from schemas.enums import ModelEventType

pytestmark = pytest.mark.integration

MODEL = "e2e-gate"


@pytest.mark.timeout(1200)
def test_the_loop_trains_checks_publishes_and_serves_a_version(
    stack: Settings,
) -> None:
    run = uuid.uuid4().hex[:8]
    model = f"{MODEL}-{run}"
    lake_uri, windows_uri = f"s3://flywheel/e2e-{run}/lake", f"s3://flywheel/e2e-{run}/windows"
    args = ["demo", "--loop", "tab", "--versions", "2", "--budget", "9m", "--model", model,
            "--learner-arg=--min-rows=2500", "--learner-arg=--train-duration=10ep"]  # fmt: skip
    env = {"FLYWHEEL_LAKE": lake_uri, "FLYWHEEL_WINDOWS": windows_uri}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert f"flywheel query --lake {lake_uri}" in " ".join(result.output.split())

    [path] = [p for p in (stack.home / "demo").glob(f"*/{RESULTS_FILE}")
              if RunResults.load(p).model_name == model]  # fmt: skip
    results = RunResults.load(path)
    by_version = {v.version: v for v in results.versions}
    assert by_version[0].requests > 0  # the fleet started on v0
    assert len(by_version) >= 3, results.versions  # v0 and two decided versions
    v1 = by_version[1]
    assert v1.gate_estimate is not None and v1.gate_lower is not None  # it was checked
    if v1.decision != "GATE_FAILED":  # passed: the fleet served it (canary, then production)
        assert v1.requests > 0 and v1.data_to_live_s is not None
    assert any(v.requests > 0 for v in results.versions if v.version > 0), results.versions

    # The registry holds the versions' history, artifacts included.
    states = ModelRegistry(stack.kafka_client_config(), codec(stack)).versions(model)
    assert {1, 2} <= set(states)
    assert states[1].events[0].event_type is ModelEventType.REGISTERED
    assert states[1].artifact.path.joinpath("manifest.json").exists()

    # The windows the learner trained on are published in the store.
    windows = Store.at(stack.storage(windows_uri))
    trained = {w for v in (1, 2) for w in states[v].events[0].training_window.mds_windows}
    dataset = states[1].events[0].training_window.mds_dataset
    assert trained <= {w.name for w in read_published_manifest(windows, dataset, "tab@1").windows}

    # The lake and its catalog: the run's table and the fleet's telemetry per version.
    con = connect(stack.lake_store(lake_uri))
    table = query(f"select version, decision from demo_results where model_name = '{model}'",
                  con=con).fetchall()  # fmt: skip
    assert sorted(v for v, _ in table) == sorted(by_version)
    served = query(
        "select model_version, sum(requests) from acceptance_by_version "
        f"where model_name = '{model}' group by 1",
        con=con,
    ).fetchall()
    lake_requests = dict(served)
    assert 0 < lake_requests[0] <= by_version[0].requests  # the sink may stop a little behind
    for version, row in by_version.items():
        if version > 0 and row.requests > 100:
            assert lake_requests.get(version, 0) > 0, (version, lake_requests)

    # The report renders from the stored results.
    report = path.parent / "report" / "index.html"
    assert report.exists() and (path.parent / "report" / "timeline.png").exists()
    assert f"v{v1.version}" in report.read_text()
