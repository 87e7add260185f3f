"""Chunking: Python along its syntax (definitions, decorators, the module top, long classes
cut), other text and unparsable Python in windows; no line twice, no blank chunk."""

from __future__ import annotations

import textwrap

import pytest

from codeindex.client.chunking import Chunk, chunk_file, split_lines

MODULE = textwrap.dedent('''\
    """The module docstring."""

    import os

    LIMIT = 3


    # A comment that belongs to the function below.
    @decorator
    @other(1)
    def first(x):
        """Its docstring."""
        return x


    async def second():
        pass

    CONSTANT = first(2)


    class Small:
        """Small enough to stay whole."""

        def method(self):
            return 1
    ''')


def spans(chunks: list[Chunk]) -> list[tuple[int, int]]:
    return [(c.start, c.end) for c in chunks]


def check_invariants(text: str, chunks: list[Chunk]) -> None:
    lines = split_lines(text)
    seen: set[int] = set()
    for c in chunks:
        assert c.text.strip(), "blank chunk"
        assert c.text == "".join(lines[c.start - 1 : c.end])
        covered = set(range(c.start, c.end + 1))
        assert not covered & seen, "a line in two chunks"
        seen |= covered
    assert spans(chunks) == sorted(spans(chunks))
    # every non-blank line is in a chunk
    assert {i for i, line in enumerate(lines, 1) if line.strip()} <= seen


def test_python_definitions_decorators_and_module_top() -> None:
    chunks = chunk_file("pkg/mod.py", MODULE)
    check_invariants(MODULE, chunks)
    assert spans(chunks) == [(1, 5), (8, 13), (16, 17), (19, 19), (22, 26)]
    function = chunks[1]
    assert function.text.startswith("# A comment that belongs")
    assert "@decorator\n@other(1)\ndef first" in function.text
    assert '"""Its docstring."""' in function.text
    assert chunks[0].text == '"""The module docstring."""\n\nimport os\n\nLIMIT = 3\n'
    assert chunks[3].text == "CONSTANT = first(2)\n"


def test_a_long_class_is_cut_into_its_header_and_methods() -> None:
    methods = "\n".join(
        f"    @property\n    def m{i}(self):\n        return {i}\n" for i in range(10)
    )
    source = f'class Big(Base):\n    """Docs."""\n\n    limit = 3\n\n{methods}\n    tail = 1\n'
    chunks = chunk_file("big.py", source, max_lines=12)
    check_invariants(source, chunks)
    assert chunks[0].text == 'class Big(Base):\n    """Docs."""\n\n    limit = 3\n'
    assert [c.text.split("def ")[1].split("(")[0] for c in chunks[1:11]] == [
        f"m{i}" for i in range(10)
    ]
    assert all(c.text.startswith("    @property\n") for c in chunks[1:11])
    assert chunks[-1].text == "    tail = 1\n"
    # the same class under the limit stays whole
    assert len(chunk_file("big.py", source, max_lines=200)) == 1


def test_a_long_module_top_is_windowed() -> None:
    source = "".join(f"X{i} = {i}\n" for i in range(25))
    assert spans(chunk_file("consts.py", source, max_lines=10)) == [(1, 10), (11, 20), (21, 25)]


def test_text_is_cut_into_windows_without_overlap_or_blank_chunks() -> None:
    lines = [f"line {i}" for i in range(1, 26)]
    lines[10:20] = [""] * 10  # lines 11..20 blank: that window drops, edges trimmed
    text = "\n".join(lines) + "\n"
    chunks = chunk_file("notes.md", text, max_lines=10)
    check_invariants(text, chunks)
    assert spans(chunks) == [(1, 10), (21, 25)]


def test_python_that_does_not_parse_is_cut_as_text() -> None:
    source = "def broken(:\n" + "".join(f"x{i} = 1\n" for i in range(14))
    assert spans(chunk_file("bad.py", source, max_lines=10)) == [(1, 10), (11, 15)]


def test_line_endings_are_kept_and_counted_as_python_does() -> None:
    source = "import os\r\n\r\ndef f():\r\n    return 1\r\n"
    chunks = chunk_file("crlf.py", source)
    assert spans(chunks) == [(1, 1), (3, 4)]
    assert chunks[1].text == "def f():\r\n    return 1\r\n"
    feed = "x = 1\n\x0c\ndef g():\n    pass\n"  # a form feed is no line break
    assert spans(chunk_file("ff.py", feed)) == [(1, 1), (3, 4)]


def test_empty_and_blank_files_have_no_chunks() -> None:
    assert chunk_file("empty.py", "") == []
    assert chunk_file("blank.txt", "\n   \n\t\n") == []


def test_the_same_text_gives_the_same_chunk_hashes() -> None:
    a, b = chunk_file("a.py", MODULE), chunk_file("b.py", MODULE)
    assert [c.hash for c in a] == [c.hash for c in b]
    assert len({c.hash for c in a}) == len(a)


def test_max_lines_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_lines"):
        chunk_file("a.txt", "x\n", max_lines=0)
