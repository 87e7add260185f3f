"""A learner on another machine: the lake and the windows in the stack's S3 store, a learner
process with a fresh, empty FLYWHEEL_HOME that knows them by URI only (and the cluster by its
addresses) trains and registers a version from a window another learner built and published."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from flywheel.clients import codec
from flywheel.settings import Settings
from ground.store import Store
from learner.continuous import LearnerPaths
from learner.data.lake_mirror import sync_mirror
from learner.data.window_manifest import read_manifest
from learner.data.window_store import read_published_manifest, sync_published
from learner.lifecycle import LearnerStats
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig
from learner.recipes.gate.recipe import GateRecipe
from model_registry.artifacts import verify_artifact
from model_registry.registry import ModelRegistry
from policies.policy import fallback_policy
from schemas.enums import ModelEventType
from tests.learner.recipes.gate.gate_offline import write_reward_lake
from tests.learner.recipes.gate.test_learner_windows import _rows

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[4]


def test_a_fresh_learner_trains_a_version_from_windows_it_knows_by_uri(
    stack: Settings, stack_store: Callable[[str], Store], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    lake, windows = stack_store("lake"), stack_store("windows")
    lake_uri, windows_uri = lake.location.uri, windows.location.uri
    models_uri = stack_store("models").location.uri
    model = f"gate-store-{uuid.uuid4().hex[:8]}"
    # The sink's files, in the store: 1,200 Reward rows of the model in two files.
    on_disk = tmp_path / "written"
    for first, seed in ((0, 1), (600, 2)):
        rows = _rows(600, seed)
        path = write_reward_lake(on_disk, rows, first_offset=first, model_name=model)
        lake.write_bytes(path.relative_to(on_disk).as_posix(), path.read_bytes())

    config_file = tmp_path / "gate.yaml"
    config = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    config["train"].update(duration="3ba", batch_size=4)  # 960 rows: 15 samples of 64
    config["loop"].update(min_new_rows=500, poll_s=0.5)
    config["release_check"]["min_lift"] = 100.0  # refused: decided without a canary
    config_file.write_text(yaml.safe_dump(config))

    # Learner A builds the window from its mirror of the lake and publishes it.
    home = tmp_path / "a"
    paths = LearnerPaths(home / "lake", home / "mds", home / "models", home / "runs",
                         lake_store=lake, windows=windows)  # fmt: skip
    recipe = GateRecipe(LearnerConfig.load(config_file), model, paths, fallback_policy(model))
    sync_mirror(lake, paths.lake, recipe.settings.lake_topics)
    recipe.build_window(None, LearnerStats())
    sync_published(windows, paths.mds_root / recipe.dataset, recipe.dataset, "tab@1")
    published = read_published_manifest(windows, recipe.dataset, "tab@1")
    assert len(published.windows) == 1 and published.windows[0].rows > 500
    window = published.windows[0].name

    # Learner B: an empty home, the cluster's addresses and the store's endpoint and keys.
    fresh = tmp_path / "b"
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("FLYWHEEL_", "AWS_", "S3_"))}  # fmt: skip
    env.update(
        stack.storage("s3://flywheel").environment(),
        PYTHONPATH=str(REPO),
        FLYWHEEL_HOME=str(fresh),
        FLYWHEEL_BOOTSTRAP_SERVERS=stack.kafka_bootstrap,
        FLYWHEEL_SCHEMA_REGISTRY_URL=stack.registry_url,
        FLYWHEEL_LAKE=lake_uri,
        FLYWHEEL_WINDOWS=windows_uri,
        FLYWHEEL_MODELS=models_uri,
    )
    command = [sys.executable, "-m", "flywheel", "learn", "--recipe", "gate", "--model", model,
               "--config", str(config_file), "--max-versions", "1"]  # fmt: skip
    log_file = tmp_path / "learner-b.log"
    with open(log_file, "w") as out:
        learner = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = learner.wait(240)
        except subprocess.TimeoutExpired:
            learner.kill()
            code = learner.wait()
    log = log_file.read_text()
    assert code == 0, log[-4000:]
    assert f"windows adopted: {window}" in " ".join(log.split()), log[-4000:]

    registry = ModelRegistry(stack.kafka_client_config(), codec(stack))
    state = registry.version(model, 1)
    assert state.status is ModelEventType.GATE_FAILED
    assert state.events[0].training_window.mds_windows == (window,)
    # B built nothing: the window stayed in the store, streamed through B's cache.
    assert read_manifest(fresh / "mds" / recipe.dataset, recipe.dataset, "tab@1") == published
    assert not (fresh / "mds" / recipe.dataset / window).exists()
    assert list((fresh / "cache" / "windows" / recipe.dataset / window).glob("shard.*"))
    assert len(list((fresh / "cache" / "lake" / "rewards").rglob("*.parquet"))) == 2
    # Its artifact is in the store too, verifiable from any machine with the store's keys.
    assert state.artifact.uri == f"{models_uri}/{model}/1"
    for name, value in stack.storage("s3://flywheel").environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLYWHEEL_ARTIFACT_CACHE", str(tmp_path / "artifacts"))
    local = verify_artifact(state.artifact.uri, state.artifact.sha256)
    assert (local / "manifest.json").is_file() and not (fresh / "models").exists()
