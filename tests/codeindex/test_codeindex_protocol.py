"""The Merkle tree both sides build: same entries, same root, whatever the order of changes."""

from __future__ import annotations

import hashlib
import random

import pytest

from codeindex.protocol import (
    DIR,
    FILE,
    ROOT,
    ChunkRef,
    FileEntry,
    Tree,
    chunk_hash,
    diff_children,
    dir_hash,
    path_problem,
)


def seg(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:20]


def path(*names: str) -> str:
    return "/".join(seg(n) for n in names)


def entry(p: str, *texts: str) -> FileEntry:
    chunks = [ChunkRef(chunk_hash(t), i * 10 + 1, i * 10 + 10) for i, t in enumerate(texts)]
    return FileEntry.of(p, chunks)


def files(n: int) -> list[FileEntry]:
    return [entry(path(f"d{i % 7}", f"e{i % 3}", f"f{i}.py"), f"code {i}") for i in range(n)]


def test_the_root_depends_on_content_not_on_insertion_order() -> None:
    entries = files(50)
    shuffled = entries[:]
    random.Random(1).shuffle(shuffled)
    assert Tree(entries).root == Tree(shuffled).root
    changed = [*entries[:-1], entry(entries[-1].path, "code changed")]
    assert Tree(changed).root != Tree(entries).root


def test_incremental_changes_match_a_tree_built_from_scratch() -> None:
    tree = Tree(files(60))
    tree.upsert(entry(path("d1", "new.py"), "x"))
    tree.delete(path("d2"))  # a whole folder
    tree.delete(path("d3", "e0", "f3.py"))
    expected = Tree(tree.files.values())
    assert tree.root == expected.root
    assert not any(p.startswith(seg("d2")) for p in tree.files)
    assert tree.children(path("d2")) is None  # no empty folders are left behind


def test_the_root_folder_hash_is_the_folder_hash_of_its_children() -> None:
    a, b = entry(path("a.py"), "1"), entry(path("src", "b.py"), "2")
    tree = Tree([a, b])
    src = dir_hash(seg("src"), {seg("b.py"): (FILE, b.hash)})
    assert tree.root == dir_hash(ROOT, {seg("a.py"): (FILE, a.hash), seg("src"): (DIR, src)})
    assert tree.children(ROOT) == {seg("a.py"): (FILE, a.hash), seg("src"): (DIR, src)}


def test_a_file_can_become_a_folder_and_back() -> None:
    tree = Tree([entry(path("x"), "file")])
    tree.upsert(entry(path("x", "y.py"), "inside"))
    assert set(tree.files) == {path("x", "y.py")}
    tree.upsert(entry(path("x"), "file again"))
    assert set(tree.files) == {path("x")}
    assert tree.root == Tree(tree.files.values()).root


def test_diff_children_descends_only_where_folders_differ() -> None:
    mine = {"a": (DIR, "1"), "b": (DIR, "2"), "c": (FILE, "3"), "d": (FILE, "4"), "k": (DIR, "5")}
    theirs = {"a": (DIR, "1"), "b": (DIR, "x"), "c": (FILE, "y"), "k": (FILE, "5"), "z": (FILE, "")}
    assert diff_children(mine, theirs) == (["b"], ["c", "d", "k"], ["z"])


@pytest.mark.parametrize(
    "bad", ["", "src/app.py", seg("a") + "/", seg("a").upper(), "../" + seg("a")]
)
def test_only_obfuscated_paths_are_accepted(bad: str) -> None:
    assert path_problem(bad) is not None
    assert path_problem(path("a", "b")) is None
