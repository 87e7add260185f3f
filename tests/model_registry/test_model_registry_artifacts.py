"""Artifacts: content-addressed manifests, atomic publishing, tamper detection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from model_registry.artifacts import (
    MANIFEST,
    ArtifactRef,
    path_of_uri,
    publish_artifact,
    verify_artifact,
)
from model_registry.errors import ArtifactError


def _model_files(root: Path, weights: bytes = b"\x00\x01weights") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "weights.bin").write_bytes(weights)
    (root / "config.json").write_text('{"hidden": 8}')
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "extra.txt").write_text("x")
    return root


def test_publish_writes_files_and_a_manifest_whose_hash_is_the_artifact_sha(
    tmp_path: Path,
) -> None:
    ref = publish_artifact(tmp_path / "models", "gate", 1, _model_files(tmp_path / "src"))
    directory = tmp_path / "models" / "gate" / "1"
    assert ref.uri == directory.as_uri() and ref.uri.startswith("file:///")
    assert ref.path == directory
    manifest = (directory / MANIFEST).read_bytes()
    assert ref.sha256 == hashlib.sha256(manifest).hexdigest()
    files = json.loads(manifest)["files"]
    assert set(files) == {"weights.bin", "config.json", "sub/extra.txt"}
    assert files["weights.bin"]["size"] == len(b"\x00\x01weights")
    assert (directory / "sub" / "extra.txt").read_text() == "x"
    assert verify_artifact(ref.uri, ref.sha256) == directory
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]  # no staging


def test_identical_content_has_the_same_sha_and_different_content_another(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    first = publish_artifact(models, "gate", 1, _model_files(tmp_path / "a"))
    same = publish_artifact(models, "other-model", 7, _model_files(tmp_path / "b"))
    changed = publish_artifact(models, "gate", 2, _model_files(tmp_path / "c", b"other"))
    assert first.sha256 == same.sha256
    assert first.uri != same.uri
    assert changed.sha256 != first.sha256


def test_republishing_the_same_content_is_idempotent_but_a_version_is_immutable(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    ref = publish_artifact(models, "gate", 1, _model_files(tmp_path / "a"))
    assert publish_artifact(models, "gate", 1, _model_files(tmp_path / "a")) == ref
    with pytest.raises(ArtifactError, match="immutable"):
        publish_artifact(models, "gate", 1, _model_files(tmp_path / "b", b"different"))


@pytest.mark.parametrize("attack", ["modify", "truncate", "delete", "add", "manifest"])
def test_verify_detects_tampering(tmp_path: Path, attack: str) -> None:
    ref = publish_artifact(tmp_path / "models", "gate", 1, _model_files(tmp_path / "src"))
    directory = ref.path
    if attack == "modify":
        (directory / "weights.bin").write_bytes(b"\x00\x01weighTs")  # same size, other bytes
    elif attack == "truncate":
        (directory / "weights.bin").write_bytes(b"")
    elif attack == "delete":
        (directory / "sub" / "extra.txt").unlink()
    elif attack == "add":
        (directory / "payload.py").write_text("import os")
    else:
        (directory / MANIFEST).write_text((directory / MANIFEST).read_text() + " ")
    with pytest.raises(ArtifactError) as caught:
        verify_artifact(ref.uri, ref.sha256)
    assert "republish" in str(caught.value) or "hash" in str(caught.value)


def test_verify_rejects_a_wrong_hash_a_missing_artifact_and_other_schemes(
    tmp_path: Path,
) -> None:
    ref = publish_artifact(tmp_path / "models", "gate", 1, _model_files(tmp_path / "src"))
    with pytest.raises(ArtifactError, match="does not match the registered"):
        verify_artifact(ref.uri, "0" * 64)
    with pytest.raises(ArtifactError, match="missing"):
        verify_artifact((tmp_path / "nowhere").as_uri(), ref.sha256)
    with pytest.raises(ArtifactError, match="file:// or s3://"):
        verify_artifact("gs://bucket/gate/1", ref.sha256)
    with pytest.raises(ArtifactError, match="not a SHA-256"):
        verify_artifact("s3://bucket/gate/1", "../../etc")  # it would name the cache directory
    assert path_of_uri(ArtifactRef(ref.uri, ref.sha256).uri) == ref.path


def test_publish_refuses_bad_sources_and_names(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="holds no files"):
        publish_artifact(models, "gate", 1, tmp_path / "empty")
    with pytest.raises(ArtifactError, match="not a directory"):
        publish_artifact(models, "gate", 1, tmp_path / "absent")
    source = _model_files(tmp_path / "src")
    with pytest.raises(ArtifactError, match="versions start at 1"):
        publish_artifact(models, "gate", 0, source)
    with pytest.raises(ArtifactError, match="cannot name a directory"):
        publish_artifact(models, "../gate", 1, source)
    (source / "link").symlink_to(source / "weights.bin")
    with pytest.raises(ArtifactError, match="symlink"):
        publish_artifact(models, "gate", 1, source)
    (source / "link").unlink()
    (source / MANIFEST).write_text("{}")
    with pytest.raises(ArtifactError, match="not an artifact"):
        publish_artifact(models, "gate", 1, source)
    assert not (models / "gate" / "1").exists()
