"""Path obfuscation (keyed, stable, per segment) and the client's state folder."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from codeindex.client.errors import IndexClientError
from codeindex.client.obfuscation import PathObfuscator, load_or_create_key
from codeindex.client.state import WorkspaceState, state_root
from codeindex.protocol import path_problem

REAL = "src/canary_secret_dir/models.py"


def test_paths_are_obfuscated_per_segment_with_the_key() -> None:
    one, two = PathObfuscator(b"1" * 32), PathObfuscator(b"2" * 32)
    obf = one.path(REAL)
    assert path_problem(obf) is None  # three segments of 20 hex digits
    assert obf.count("/") == 2
    assert obf == PathObfuscator(b"1" * 32).path(REAL)  # stable
    assert obf != two.path(REAL)  # keyed
    assert obf.split("/")[0] == one.path("src/other.py").split("/")[0]  # a shared folder
    for segment in ("src", "canary_secret_dir", "models", "py", "canary"):
        assert segment not in obf
    assert one.path_map([REAL, "a.txt"]) == {obf: REAL, one.path("a.txt"): "a.txt"}


def test_the_key_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "state" / "key"
    key = load_or_create_key(path)
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_or_create_key(path) == key
    assert load_or_create_key(tmp_path / "other" / "key") != key


def test_a_damaged_key_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("not hex")
    with pytest.raises(IndexClientError, match="damaged"):
        load_or_create_key(path)


def test_the_state_folder_is_keyed_by_the_workspace_path_outside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    ws = tmp_path / "ws"
    ws.mkdir()
    store = WorkspaceState(ws)
    assert store.dir.parent == state_root() == tmp_path / "xdg" / "flywheel" / "index"
    assert re.fullmatch(r"[0-9a-f]{16}", store.dir.name)
    assert WorkspaceState(ws / "." / "").dir == store.dir
    assert WorkspaceState(tmp_path / "elsewhere").dir != store.dir
    state = store.load()
    assert not store.exists()
    assert store.load().workspace_id != state.workspace_id  # a fresh id until saved
    state.root = "a" * 64
    store.save(state)
    assert store.load() == state
    store.obfuscator()
    assert store.key_file.exists()
    store.forget()
    assert not store.dir.exists()


def test_xdg_state_home_defaults_to_local_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert state_root() == Path.home() / ".local" / "state" / "flywheel" / "index"
