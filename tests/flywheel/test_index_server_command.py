"""`flywheel index serve` (flywheel/commands/index_server.py): options, light imports, and the
message when the embedder package is missing."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from flywheel.commands import index_server


def test_help_shows_the_port_and_the_topics() -> None:
    result = CliRunner().invoke(index_server.serve, ["--help"])
    assert result.exit_code == 0
    for text in ("8092", "--embedder", "--files-topic", "--embeddings-topic", "--no-auth",
                 "--metrics-port"):  # fmt: skip
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
