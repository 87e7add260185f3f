"""Artifacts in the local stack's object store: the manifest uploaded last, an ``s3://``
artifact verified through a local cache named by its hash, tampering and half-published
artifacts refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flywheel.settings import Settings
from ground.store import Store
from model_registry.artifacts import MANIFEST, publish_artifact, verify_artifact
from model_registry.errors import ArtifactError
from tests.model_registry.test_model_registry_artifacts import _model_files

pytestmark = pytest.mark.integration


@pytest.fixture
def models(
    stack: Settings, stack_store: Callable[[str], Store], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Store:  # fmt: skip
    """The models' store, its endpoint and keys in this process's environment (as a serving
    replica or a learner on another machine has them), and an empty artifact cache."""
    for name, value in stack.storage("s3://flywheel").environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLYWHEEL_ARTIFACT_CACHE", str(tmp_path / "cache"))
    return stack_store("models")


def test_an_artifact_in_the_store_verifies_through_a_local_cache(
    models: Store, tmp_path: Path
) -> None:
    source = _model_files(tmp_path / "src")
    ref = publish_artifact(models, "gate", 1, source)
    assert ref.uri == f"{models.location.uri}/gate/1"
    assert publish_artifact(models, "gate", 1, source) == ref  # idempotent
    local = verify_artifact(ref.uri, ref.sha256)
    assert local == tmp_path / "cache" / ref.sha256
    for relative in ("weights.bin", "config.json", "sub/extra.txt"):
        assert (local / relative).read_bytes() == (source / relative).read_bytes()
    assert verify_artifact(ref.uri, ref.sha256) == local  # cached: no second download
    with pytest.raises(ArtifactError, match="other content"):
        publish_artifact(models, "gate", 1, _model_files(tmp_path / "other", b"other weights"))


def test_a_tampered_or_half_published_artifact_is_refused(models: Store, tmp_path: Path) -> None:
    ref = publish_artifact(models, "gate", 1, _model_files(tmp_path / "src"))
    models.write_bytes("gate/1/weights.bin", b"\x00\x01tampered")
    with pytest.raises(ArtifactError, match="does not match its manifest"):
        verify_artifact(ref.uri, ref.sha256)
    with pytest.raises(ArtifactError, match="does not match the registered"):
        verify_artifact(ref.uri, "0" * 64)
    # A publisher killed before the manifest: the files are there, the artifact is not.
    models.write_bytes("gate/2/weights.bin", b"w")
    with pytest.raises(ArtifactError, match=f"no {MANIFEST}"):
        verify_artifact(f"{models.location.uri}/gate/2", "1" * 64)
