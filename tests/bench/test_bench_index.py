"""`bench.index --quick` runs end to end on tiny sizes (so the bench cannot rot) and its report
holds what the full run is judged by."""

from __future__ import annotations

import json
from pathlib import Path

from bench.index import main


def test_the_quick_run_reports_sync_query_and_embedding_figures(tmp_path: Path) -> None:
    out = tmp_path / "index.json"
    report = main(["--quick", "--files", "120", "--chunks", "1500", "--out", str(out)])
    assert json.loads(out.read_text()) == report

    sync = report["sync"]
    assert sync["files"] == 120 and sync["changed_files"] == 1
    assert sync["first"]["chunks_uploaded"] == sync["chunks"]
    # One definition edited: one new chunk, a few hundred bytes against the whole tree.
    assert sync["after_change"]["files_sent"] == 1
    assert 1 <= sync["after_change"]["chunks_uploaded"] <= 2
    assert sync["bytes_ratio"] < 0.05
    unchanged = sync["unchanged"]
    assert (unchanged["requests"], unchanged["bytes"]) == (1, sync["root_request_bytes"])

    query = report["query"]
    assert query["chunks"] == 1500 and query["queries"] == 40
    assert 0 < query["p50_ms"] <= query["p99_ms"]

    embedding = report["embedding"]
    if report["real_embedder"]:
        assert embedding["texts"] == 64 and embedding["ratio"] > 0
    else:
        assert "skipped" in embedding
