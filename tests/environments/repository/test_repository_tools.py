"""The file tools on a copy (no sandbox): what each shows and does, and a hostile call per tool
(path escapes, symbolic links, huge files, edits that miss, are ambiguous or break syntax)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from environments.repository.tools import (
    MAX_FILE_CHARS,
    MAX_READ_BYTES,
    TOOL_NAMES,
    TOOLS,
    ToolFailure,
    check_arguments,
    edit,
    read_file,
    search,
)
from policies.agent_chat import tools_line

TEXT = 'from ops import reverse\n\n\ndef shout(s):\n    """Reverse s, upper-case it."""\n    return reverse(s)\n'  # noqa: E501
OPS = "def reverse(s):\n    return s[::-1]\n\n\ndef upper(s):\n    return s.upper()\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    (copy / "pkg").mkdir(parents=True)
    (copy / "text.py").write_text(TEXT)
    (copy / "ops.py").write_text(OPS)
    (copy / "pkg" / "notes.txt").write_text("one\ntwo\n")
    return copy


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}  # fmt: skip


def test_tools_are_the_five_openai_functions_in_order() -> None:
    assert TOOL_NAMES == ("read_file", "search", "edit", "run_tests", "submit")
    for tool in TOOLS:
        assert tool["type"] == "function"
        parameters = tool["function"]["parameters"]
        assert parameters["type"] == "object"
        assert set(parameters["required"]) <= set(parameters["properties"])
    assert tools_line(TOOLS) == (
        "Tools: read_file(path, start, end), search(query), edit(path, old, new), "
        "run_tests(selector), submit()"
    )


def test_arguments_are_checked_against_the_definitions() -> None:
    assert check_arguments("read_file", {"path": "a.py", "start": 2, "end": None}) is None
    assert check_arguments("submit", {}) is None
    assert "needs 'path'" in (check_arguments("read_file", {}) or "")
    assert "integer" in (check_arguments("read_file", {"path": "a", "start": "2"}) or "")
    assert "integer" in (check_arguments("read_file", {"path": "a", "start": True}) or "")
    assert "string" in (check_arguments("edit", {"path": "a", "old": 1, "new": ""}) or "")
    assert "not force" in (check_arguments("submit", {"force": True}) or "")


def test_read_file_shows_the_file_exactly_and_ranges_under_a_header(root: Path) -> None:
    assert read_file(root, "text.py") == TEXT  # no line numbers: lines copy into edit's old
    assert read_file(root, "./pkg/notes.txt") == "one\ntwo\n"
    assert read_file(root, "text.py", 4, 6) == "[text.py lines 4-6 of 6]\n" + "".join(
        TEXT.splitlines(keepends=True)[3:6]
    )
    assert (
        read_file(root, "text.py", start=6) == "[text.py lines 6-6 of 6]\n    return reverse(s)\n"
    )
    assert read_file(root, "text.py", end=99).startswith("[text.py lines 1-6 of 6]")
    with pytest.raises(ToolFailure, match="no lines 7"):
        read_file(root, "text.py", 7, 9)
    with pytest.raises(ToolFailure, match="no such file"):
        read_file(root, "missing.py")


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../../etc/passwd", "leaves the repository"),
        ("pkg/../../outside.txt", "leaves the repository"),
        ("/etc/passwd", "absolute"),
        ("pkg", "not a file"),
        ("", "empty"),
    ],
)
def test_read_file_refuses_paths_outside_the_copy(root: Path, path: str, why: str) -> None:
    (root.parent / "outside.txt").write_text("host secret")
    with pytest.raises(ToolFailure, match=why) as failure:
        read_file(root, path)
    assert "host secret" not in str(failure.value) and "root:" not in str(failure.value)


def test_symbolic_links_planted_in_the_copy_are_refused(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(secret, root / "link.py")
    os.symlink(tmp_path, root / "linkdir")
    for path in ("link.py", "linkdir/secret.txt"):
        with pytest.raises(ToolFailure, match="symbolic link"):
            read_file(root, path)
        with pytest.raises(ToolFailure, match="symbolic link"):
            edit(root, path, "host", "pwned")
    assert secret.read_text() == "host secret"
    assert search(root, "host secret") == "no matches for 'host secret'"  # links: not indexed


def test_a_huge_file_is_read_up_to_a_bound_for_the_episode_to_cut(root: Path) -> None:
    (root / "big.py").write_text("x = 1\n" * 200_000)
    assert len(read_file(root, "big.py")) == MAX_READ_BYTES  # the episode cuts it further


def test_search_finds_the_best_chunks_by_bm25(root: Path) -> None:
    hits = search(root, "upper case").splitlines()
    # the docstring holds both terms; the helper only one
    assert hits == ["text.py:4-6: def shout(s):", "ops.py:5-6: def upper(s):"]
    assert len(search(root, "s def return").splitlines()) == 3
    assert search(root, "shout").splitlines()[0] == "text.py:4-6: def shout(s):"
    assert search(root, "zebra") == "no matches for 'zebra'"
    with pytest.raises(ToolFailure, match="empty"):
        search(root, "  ")


def test_search_on_a_large_file_stays_fast_and_short(root: Path) -> None:
    body = "".join(f"def filler_{i}(x):\n    return x + {i}\n\n\n" for i in range(5000))
    (root / "big.py").write_text(body + "def needle_haystack(x):\n    return x\n")
    started = time.monotonic()
    hits = search(root, "needle haystack")
    assert time.monotonic() - started < 10
    assert hits.splitlines()[0] == "big.py:20001-20002: def needle_haystack(x):"
    assert len(hits) < 300


def test_edit_replaces_the_unique_occurrence(root: Path) -> None:
    out = edit(root, "text.py", "return reverse(s)", "return upper(reverse(s))")
    assert out == "edited text.py at line 6"
    assert read_file(root, "text.py") == TEXT.replace("reverse(s)\n", "upper(reverse(s))\n")
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temp left


@pytest.mark.parametrize(
    ("path", "old", "new", "why"),
    [
        ("text.py", "return upper(s)", "x", "not found"),
        ("ops.py", "    return s", "    return 0", "more than once"),
        ("text.py", "return reverse(s)", "return reverse(s", "would not parse"),
        ("text.py", "reverse(s)\n", "(\n", "line 6"),  # the parser's line
        ("text.py", "", "x", "old is empty"),
        ("text.py", "def", "def" + "x" * MAX_FILE_CHARS, "exceed"),
        ("../text.py", "def", "x", "leaves the repository"),
        ("/etc/passwd", "root", "x", "absolute"),
    ],
)
def test_a_bad_edit_changes_nothing(root: Path, path: str, old: str, new: str, why: str) -> None:
    before = _files(root.parent)
    with pytest.raises(ToolFailure, match=why):
        edit(root, path, old, new)
    assert _files(root.parent) == before


def test_an_edit_of_a_text_file_skips_the_python_check(root: Path) -> None:
    edit(root, "pkg/notes.txt", "two", "two (")
    assert read_file(root, "pkg/notes.txt") == "one\ntwo (\n"
