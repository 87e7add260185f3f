"""The pair miner: docstrings stripped from the code, held-out packages and their copies never
in the training pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.errors import TrainingDataError
from learner.recipes.code_embedder.pairs import (
    HELD_OUT,
    first_sentence,
    functions_of,
    is_held_out,
    mine_functions,
    python_files,
    source_roots,
    training_pairs,
)

SOURCE = '''
import os


@cache
def user_home(name):
    """Return the home directory of a user.

    Looks the user up in the password database.
    """
    entry = pwd.getpwnam(name)
    return entry.pw_dir


class Store:
    def load(self, key):
        """Load the value stored under a key."""
        return self.items[key]

    def stub(self):
        """Only a docstring: an abstract stub."""


def undocumented(x):
    return x + 1
'''


def test_functions_lose_their_docstrings_and_keep_decorators_and_bodies() -> None:
    found = {f.name: f for f in functions_of(SOURCE, "pkg", "pkg/mod.py")}
    assert set(found) == {"user_home", "load", "undocumented"}  # the stub is skipped
    home = found["user_home"]
    body = "    entry = pwd.getpwnam(name)\n    return entry.pw_dir"
    assert home.code == f"@cache\ndef user_home(name):\n{body}"
    assert "password" not in home.code and home.docstring is not None
    assert found["load"].code == "def load(self, key):\n    return self.items[key]"
    assert found["undocumented"].docstring is None
    assert list(functions_of("def broken(:", "pkg", "x.py")) == []


def test_the_query_is_the_first_sentence_of_a_real_sentence() -> None:
    assert first_sentence("Return the home directory of a user.\n\nMore.") == (
        "Return the home directory of a user."
    )
    assert first_sentence("Load it. Then more words follow here.") is None  # 2 words
    assert first_sentence("f(x) -> int\n\nSignature line.") is None
    assert first_sentence("Parse the\n    wrapped line. Rest.") == "Parse the wrapped line."


def test_held_out_packages_and_their_copies_are_recognised(tmp_path: Path) -> None:
    for held in [
        "rich/console.py", "pip/_vendor/rich/text.py", "httpx2/_api.py", "yaml/__init__.py",
        "_yaml/__init__.py", "jinja2/ext.py", "vendor/click.py",
    ]:  # fmt: skip
        assert is_held_out(tmp_path / held, tmp_path), held
    for kept in ["richtext/a.py", "pip/_internal/cli.py", "clicker.py", "asyncio/tasks.py"]:
        assert not is_held_out(tmp_path / kept, tmp_path), kept


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_no_held_out_function_reaches_the_training_pairs(tmp_path: Path) -> None:
    copied = (
        'def render(self, w):\n    """Render the table at a width."""\n    return self.cells[:w]\n'
    )
    _write(tmp_path, "rich/table.py", copied)
    vendored = 'def out(x):\n    """Print the text now."""\n    print(x)\n'
    _write(tmp_path, "pip/_vendor/rich/console.py", vendored)
    _write(tmp_path, "othertables/table.py", copied.replace("Render the table", "Draw a table"))
    _write(tmp_path, "tool/core.py", SOURCE)
    _write(tmp_path, "tool/tests/test_core.py", SOURCE.replace("user_home", "test_home"))
    training, held_out = mine_functions([tmp_path])
    assert {f.package for f in held_out} == {"rich", "pip"}
    pairs = training_pairs(training, held_out, max_per_package=100)
    # the copy of rich's function under another name is dropped; tests are never sources
    assert [p.query for p in pairs] == [
        "Return the home directory of a user.", "Load the value stored under a key.",
    ]  # fmt: skip
    assert pairs[0].name_query == "user home" and "password" not in pairs[0].code
    assert len(training_pairs(training, held_out, max_per_package=1)) == 1


def test_packages_restrict_the_sources_and_the_held_out_packages_are_still_mined(
    tmp_path: Path,
) -> None:
    copied = 'def render(self, w):\n    """Render the table at a width."""\n    return w[:2]\n'
    _write(tmp_path, "rich/table.py", copied)
    _write(tmp_path, "tool/core.py", copied.replace("Render the", "Draw the"))
    _write(
        tmp_path, "tool/more.py", 'def f(a):\n    """Add one to the number."""\n    return a + 1\n'
    )
    _write(tmp_path, "single.py", SOURCE)
    _write(tmp_path, "other/core.py", SOURCE.replace("user_home", "other_home"))
    training, held_out = mine_functions([tmp_path], ["tool", "single"])
    assert {f.package for f in training} == {"tool", "single"}  # not "other"
    assert {f.package for f in held_out} == {"rich"}
    pairs = training_pairs(training, held_out, max_per_package=100)
    # rich's code under another name is dropped
    assert [(p.package, p.query) for p in pairs] == [
        ("single", "Return the home directory of a user."),
        ("single", "Load the value stored under a key."),
        ("tool", "Add one to the number."),
    ]
    with pytest.raises(TrainingDataError, match=r"\['nowhere'\]"):
        mine_functions([tmp_path], ["tool", "nowhere"])


def test_the_real_held_out_packages_exist_and_none_is_a_training_file() -> None:
    """On this machine's sources (file names only, nothing parsed): each held-out package is
    there, and every file under one of them, vendored copies included, is held out."""
    site = Path(source_roots()[-1])
    roots = [r for r in source_roots() if (r / "rich").is_dir()]
    assert roots, f"no held-out packages under {source_roots()}"
    root = roots[0]
    for package in HELD_OUT:
        assert (root / package).is_dir(), f"held-out package {package} is missing in {site}"
    held = [p for p in python_files(root) if is_held_out(p, root)]
    in_held_out_dirs = [
        p for p in python_files(root)
        if {*HELD_OUT, "httpx2"} & set(p.relative_to(root).parts[:-1])
    ]  # fmt: skip
    assert set(in_held_out_dirs) <= set(held)
    assert any("_vendor" in p.parts for p in held)  # pip's vendored rich
