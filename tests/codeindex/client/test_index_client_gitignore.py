"""The workspace walk: .gitignore semantics (a table of cases), nested files, .git/, the size
limit, binary files and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codeindex.client.gitignore import Ignores, parse_rule
from codeindex.client.workspace import read_text, walk_workspace

# (the root .gitignore, a path, is it a folder, ignored?)
CASES = [
    ("*.pyc", "a.pyc", False, True),
    ("*.pyc", "deep/down/a.pyc", False, True),
    ("*.pyc", "a.py", False, False),
    ("# a comment\n\n*.log", "x.log", False, True),
    ("# *.log", "x.log", False, False),
    (r"\#notes", "#notes", False, True),
    ("build/", "build", True, True),
    ("build/", "build", False, False),  # a trailing / matches folders only
    ("build/", "src/build", True, True),
    ("/build", "build", True, True),
    ("/build", "src/build", True, False),  # a leading / anchors to the .gitignore's folder
    ("doc/frotz", "doc/frotz", True, True),
    ("doc/frotz", "a/doc/frotz", True, False),  # a middle / anchors too
    ("a?c", "abc", False, True),
    ("a?c", "a/c", False, False),
    ("a[bc]d", "acd", False, True),
    ("a[!bc]d", "abd", False, False),
    ("a[!bc]d", "axd", False, True),
    ("a[^x]d", "axd", False, False),
    ("[0-9]*.txt", "7up.txt", False, True),
    ("[0-9]*.txt", "up.txt", False, False),
    ("**/logs", "logs", True, True),
    ("**/logs", "a/b/logs", True, True),
    ("**/logs/out", "a/logs/out", False, True),
    ("out/**", "out/x/y.txt", False, True),
    ("out/**", "out", True, False),
    ("a/**/b", "a/b", False, True),
    ("a/**/b", "a/x/y/b", False, True),
    ("a/**/b", "a/x/y/c", False, False),
    ("foo*bar", "foo/bar", False, False),  # * never crosses a /
    ("*.log\n!keep.log", "keep.log", False, False),
    ("*.log\n!keep.log", "other.log", False, True),
    ("!keep.log\n*.log", "keep.log", False, True),  # the last match wins
    ("trailing.txt   ", "trailing.txt", False, True),
    ("sp\\ ", "sp ", False, True),
]


@pytest.mark.parametrize(("gitignore", "path", "is_dir", "expected"), CASES)
def test_gitignore_patterns(gitignore: str, path: str, is_dir: bool, expected: bool) -> None:
    assert Ignores().with_file("", gitignore).ignored(path, is_dir) is expected


def test_a_nested_gitignore_applies_under_its_folder_and_wins_over_the_root() -> None:
    ignores = Ignores().with_file("", "*.gen\n").with_file("pkg", "!keep.gen\n/local.txt\n")
    assert ignores.ignored("pkg/keep.gen", False) is False
    assert ignores.ignored("pkg/sub/keep.gen", False) is False  # no slash: any depth below
    assert ignores.ignored("keep.gen", False) is True  # outside pkg/ the root rule stands
    assert ignores.ignored("pkg/local.txt", False) is True
    assert ignores.ignored("pkg/sub/local.txt", False) is False  # anchored to pkg/
    assert ignores.ignored("local.txt", False) is False


def test_blank_and_comment_lines_are_no_rules() -> None:
    assert parse_rule("") is None
    assert parse_rule("   ") is None
    assert parse_rule("# x") is None
    assert parse_rule("!") is None


def _write(root: Path, rel: str, text: str = "x = 1\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_walk_honours_nested_gitignores_git_and_the_size_limit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, ".gitignore", "*.log\nbuild/\n")
    _write(ws, "main.py")
    _write(ws, "run.log")
    _write(ws, "build/out.py")
    _write(ws, "pkg/.gitignore", "!keep.log\nsecret/\n")
    _write(ws, "pkg/keep.log")
    _write(ws, "pkg/drop.log.txt")
    _write(ws, "pkg/secret/key.py")
    _write(ws, ".git/config")
    _write(ws, "sub/.git", "gitdir: elsewhere\n")  # a worktree's .git file
    _write(ws, "big.txt", "y" * 2000)
    walk = walk_workspace(ws, max_file_size=1000)
    assert [f.rel for f in walk.files] == [
        ".gitignore", "main.py", "pkg/.gitignore", "pkg/drop.log.txt", "pkg/keep.log",
    ]  # fmt: skip
    assert walk.skipped["ignored"] == 3  # run.log, build/, pkg/secret/
    assert walk.skipped["over the size limit"] == 1
    assert walk_workspace(ws, max_file_size=1000).files == walk.files  # deterministic


def test_symlinks_are_followed_only_to_files_inside(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    _write(ws, "real/a.py")
    _write(outside, "secret.py")
    os.symlink(outside / "secret.py", ws / "leak.py")
    os.symlink(outside, ws / "leakdir")
    os.symlink(ws / "real", ws / "loop")
    os.symlink(ws / "real" / "a.py", ws / "alias.py")
    walk = walk_workspace(ws)
    assert [f.rel for f in walk.files] == ["alias.py", "real/a.py"]
    assert walk.skipped["symlink outside the workspace"] == 2
    assert walk.skipped["symlinked folder"] == 1


def test_binary_and_non_utf8_files_read_as_none(tmp_path: Path) -> None:
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"PK\x03\x04\x00\x00" + b"x" * 100)
    latin = tmp_path / "l.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    text = _write(tmp_path, "t.py", "print('é')\n")
    assert read_text(binary) is None
    assert read_text(latin) is None
    assert read_text(text) == "print('é')\n"


def test_the_walk_skips_the_index_state_inside_the_workspace(tmp_path: Path) -> None:
    _write(tmp_path, "code.py")
    _write(tmp_path, ".local/state/flywheel/index/abc/key", "00" * 32)
    _write(tmp_path, ".local/other.txt")
    walk = walk_workspace(tmp_path, skip=[tmp_path / ".local/state/flywheel/index"])
    assert [f.rel for f in walk.files] == ["code.py", ".local/other.txt"]
