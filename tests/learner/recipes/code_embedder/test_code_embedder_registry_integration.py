"""`flywheel learn --recipe code-embedder` on the real broker and registry, with the seconds-long
config (configs/smoke.yaml: a few stdlib packages, a tiny model): the version is registered with
its held-out metrics, its artifact published (content-addressed, with its manifest) and promoted,
and the published directory loads as an embedder, directly and through the registry as
`flywheel index serve --embedder-model` resolves it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from codeindex.embedding.embedder import load_embedder
from flywheel.clients import codec
from flywheel.commands.index_server import registered_embedder_dir
from flywheel.settings import Settings
from learner.recipes.code_embedder.config import CodeEmbedderConfig
from learner.recipes.code_embedder.pairs import HELD_OUT_NAMES
from model_registry.artifacts import MANIFEST, verify_artifact
from model_registry.registry import ModelRegistry
from schemas.enums import Channel, ModelEventType

pytestmark = pytest.mark.integration

SMOKE = Path(__file__).parents[4] / "learner/recipes/code_embedder/configs/smoke.yaml"


def test_learn_registers_publishes_and_promotes_a_loadable_embedder(
    stack: Settings, tmp_path: Path
) -> None:
    model = f"code-embedder-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FLYWHEEL_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "flywheel", "learn", "--recipe", "code-embedder",
               "--config", str(SMOKE), "--model", model]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{model} v1 registered and promoted" in " ".join(done.stderr.split())

    registry = ModelRegistry(stack.kafka_client_config(), codec(stack))
    state = registry.version(model, 1)
    assert [e.event_type for e in state.events] == [
        ModelEventType.REGISTERED, ModelEventType.PROMOTED,
    ]  # fmt: skip
    metrics = state.events[0].metrics
    assert metrics["heldout_queries"] > 100
    for ranker in ("bm25", "dense", "hybrid"):
        assert 0.0 <= metrics[f"heldout_{ranker}_mrr@10"] <= metrics[f"heldout_{ranker}_recall@10"]

    # published: content-addressed (the SHA-256 of its manifest), verified, under FLYWHEEL_HOME
    directory = state.artifact.path
    assert directory == tmp_path / "models" / model / "1"
    manifest = (directory / MANIFEST).read_bytes()
    assert hashlib.sha256(manifest).hexdigest() == state.artifact.sha256
    assert {"embedder.json", "model.safetensors", "tokenizer.json"} <= set(
        json.loads(manifest)["files"]
    )
    assert verify_artifact(state.artifact.uri, state.artifact.sha256) == directory
    production = registry.channels(model)[Channel.PRODUCTION]
    assert (production.version, production.artifact_sha256) == (1, state.artifact.sha256)

    # loadable, named and versioned as registered, with the recorded dimension and metrics
    embedder = load_embedder(directory, device="cpu")
    dim = CodeEmbedderConfig.load(SMOKE).model.hidden_size
    assert (embedder.name, embedder.version, embedder.dim) == (model, "1", dim)
    assert embedder.manifest.metrics == pytest.approx(dict(metrics))
    vectors = embedder.encode(["parse a JSON document", "def loads(s):\n    return decode(s)"])
    assert vectors.shape == (2, dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert registered_embedder_dir(registry, model) == directory
    assert registered_embedder_dir(registry, f"{model}:1") == directory

    # trained on the config's packages only, none of them held out
    config = CodeEmbedderConfig.load(SMOKE)
    run_dir = tmp_path / "runs" / "code-embedder" / config.digest()
    pairs = [json.loads(line) for line in (run_dir / "pairs.jsonl").read_text().splitlines()]
    packages = {p["package"] for p in pairs}
    assert packages <= set(config.pairs.packages) and not packages & HELD_OUT_NAMES
    assert embedder.manifest.training["pairs"] == len(pairs)
