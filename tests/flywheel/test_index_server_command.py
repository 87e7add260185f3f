"""`flywheel index serve` (flywheel/commands/index_server.py): options, light imports, the
message when the embedder package is missing, and an embedder resolved through the registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

from flywheel.commands import index_server
from model_registry.artifacts import ArtifactRef, publish_artifact
from model_registry.errors import ArtifactError, ModelRegistryError
from schemas.enums import Channel


def test_help_shows_the_port_and_the_topics() -> None:
    result = CliRunner().invoke(index_server.serve, ["--help"])
    assert result.exit_code == 0
    for text in ("8092", "--embedder", "--embedder-model", "--files-topic", "--embeddings-topic",
                 "--no-auth", "--metrics-port"):  # fmt: skip
        assert text in result.output


def test_the_command_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, flywheel.commands.index_server\n"
        "heavy = {'numpy', 'usearch', 'torch', 'confluent_kafka', 'codeindex.server'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_build_without_the_embedder_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "codeindex.embedding.embedder", None)
    with pytest.raises(click.ClickException, match=r"code embedder \(codeindex.embedding\)"):
        index_server.load_embedder(None)


class _Registry:
    """The two reads of ModelRegistry that resolve an embedder, over one published version."""

    def __init__(self, name: str, artifact: ArtifactRef, production: bool = True) -> None:
        self.name, self.artifact, self.production = name, artifact, production

    def version(self, name: str, version: int) -> SimpleNamespace:
        if (name, version) != (self.name, 1):
            raise ModelRegistryError(f"{name} has no version {version}; known: [1]")
        return SimpleNamespace(artifact=self.artifact)

    def channels(self, name: str) -> dict[Channel, SimpleNamespace]:
        if name != self.name or not self.production:
            return {}
        pointer = SimpleNamespace(
            artifact_uri=self.artifact.uri, artifact_sha256=self.artifact.sha256
        )
        return {Channel.PRODUCTION: pointer}


def _published(tmp_path: Path) -> ArtifactRef:
    source = tmp_path / "saved"
    source.mkdir()
    (source / "config.json").write_text("{}")
    return publish_artifact(tmp_path / "models", "emb", 1, source)


def test_a_registered_embedder_resolves_to_its_verified_artifact(tmp_path: Path) -> None:
    artifact = _published(tmp_path)
    registry: Any = _Registry("emb", artifact)
    assert index_server.registered_embedder_dir(registry, "emb") == artifact.path
    assert index_server.registered_embedder_dir(registry, "emb:1") == artifact.path
    with pytest.raises(ModelRegistryError, match="no version 2"):
        index_server.registered_embedder_dir(registry, "emb:2")
    with pytest.raises(ModelRegistryError, match="must be a number"):
        index_server.registered_embedder_dir(registry, "emb:latest")
    with pytest.raises(ModelRegistryError, match="no production version; name one as emb:VERSION"):
        index_server.registered_embedder_dir(_Registry("emb", artifact, production=False), "emb")
    (artifact.path / "config.json").write_text('{"changed": true}')
    with pytest.raises(ArtifactError, match="does not match its manifest"):
        index_server.registered_embedder_dir(registry, "emb")


def test_serve_loads_the_registered_embedder_and_refuses_both_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[str] = []

    def resolve(_registry: object, spec: str) -> Path:
        resolved.append(spec)
        return tmp_path

    def load(directory: Path | None) -> object:
        raise click.ClickException(f"loading {directory}")  # stops the command before serving

    monkeypatch.setattr(index_server, "listen", lambda _host, _port: None)
    monkeypatch.setattr(index_server, "registered_embedder_dir", resolve)
    monkeypatch.setattr(index_server, "load_embedder", load)
    result = CliRunner().invoke(index_server.serve, ["--embedder-model", "emb:3"])
    assert resolved == ["emb:3"] and f"loading {tmp_path}" in result.output
    both = CliRunner().invoke(
        index_server.serve, ["--embedder", str(tmp_path), "--embedder-model", "emb"]
    )
    assert both.exit_code == 2 and "not both" in both.output
