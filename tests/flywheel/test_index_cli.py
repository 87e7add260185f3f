"""`flywheel index sync|search|status|erase` end to end against the server double."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from tests.codeindex.client.index_double import IndexDouble


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> IndexDouble:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("FLYWHEEL_API_KEY", "k")
    server = IndexDouble(api_key="k")
    real_client = httpx.Client

    def client(**kwargs: Any) -> httpx.Client:
        return real_client(**{**kwargs, "transport": server.transport()})

    monkeypatch.setattr("codeindex.client.api.httpx.Client", client)
    return server


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["index", *args])
    assert result.exit_code == 0, result.output
    return result


def test_sync_search_status_erase(tmp_path: Path, double: IndexDouble) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("def greet(name):\n    return f'hi {name}'\n")
    (ws / "notes.md").write_text("# notes\n")

    dry = json.loads(invoke("sync", str(ws), "--dry-run", "--json").output)
    assert sorted(dry["would_send"]) == ["notes.md", "src/app.py"] and not double.trees
    first = json.loads(invoke("sync", str(ws), "--json").output)
    assert first["in_sync"] and first["files_sent"] == 2 and first["chunks_uploaded"] == 2
    again = invoke("sync", str(ws)).output
    assert "in sync: sent 0 file(s)" in again and "1 request(s)" in again

    (tree,) = double.trees.values()
    entry = next(e for e in tree.files.values() if "/" in e.path)  # src/app.py
    (chunk,) = entry.chunks
    double.search_results = [
        {"chunk": chunk.hash, "path": entry.path, "start": 1, "end": 2, "score": 0.5}
    ]
    found = invoke("search", str(ws), "greeting", "--lexical-weight", "0").output
    assert found.startswith("src/app.py:1-2 0.5000\ndef greet(name):\n")  # the cosine alone
    # The hybrid: 0.5 x cosine + 0.5 x BM25 / the best BM25 (this chunk's own) = 0.75.
    assert invoke("search", str(ws), "greet a name").output.startswith("src/app.py:1-2 0.7500\n")
    hits = json.loads(invoke("search", str(ws), "greeting", "--json").output)
    assert hits[0]["path"] == "src/app.py" and hits[0]["text"].startswith("def greet")

    status = json.loads(invoke("status", str(ws), "--json").output)
    fields = {(r["source"], r["field"]): r["value"] for r in status}
    assert fields[("server", "files")] == 2
    assert fields[("local", "root")] == first["root"]

    assert "erased" in invoke("erase", str(ws)).output
    assert not double.trees
    result = CliRunner().invoke(cli, ["index", "status", str(ws)])
    assert result.exit_code == 1 and "flywheel index sync" in result.output


def test_an_unreachable_server_is_one_line_naming_the_serve_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "a.py").write_text("x = 1\n")
    result = CliRunner().invoke(
        cli, ["index", "sync", str(tmp_path), "--url", "http://127.0.0.1:1"]
    )
    assert result.exit_code == 1
    assert "flywheel index serve" in result.output and "Traceback" not in result.output
