"""The client's state per workspace (docs/index.md, "Client state"), outside the workspace.

`$XDG_STATE_HOME/flywheel/index/<sha256(absolute workspace path)[:16]>/` (XDG_STATE_HOME
defaults to `~/.local/state`): `state.json` (workspace id, server URL, last synced root, the
embedder), `key` (the obfuscation key, mode 0600), `chunks.json` (the chunk cache:
codeindex/client/cache.py) and `terms.jsonl` (each chunk's term counts for BM25:
codeindex/client/lexical.py). Nothing here is ever uploaded: a workspace holding this folder (a
sync of the home folder) walks around it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from codeindex.client.errors import IndexClientError
from codeindex.client.obfuscation import PathObfuscator, load_or_create_key
from ground.durable import write_durably


def state_root() -> Path:
    """`$XDG_STATE_HOME/flywheel/index` (default `~/.local/state/flywheel/index`)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "flywheel" / "index"


@dataclass
class ClientState:
    """What the client remembers of a workspace between runs."""

    workspace: str  # the absolute path, for whoever looks into the folder
    workspace_id: str  # a random UUID: the server's name for this workspace
    server_url: str | None = None
    root: str | None = None  # the root hash of the last complete sync
    embedder: str | None = None  # the embedder of that sync, when the server named it


class WorkspaceState:
    """The state folder of the workspace at `workspace` (under `root`, default `state_root()`)."""

    def __init__(self, workspace: Path, root: Path | None = None) -> None:
        self.workspace = workspace.resolve()
        digest = hashlib.sha256(str(self.workspace).encode("utf-8")).hexdigest()[:16]
        self.dir = (root or state_root()) / digest

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def key_file(self) -> Path:
        return self.dir / "key"

    @property
    def cache_file(self) -> Path:
        return self.dir / "chunks.json"

    @property
    def terms_file(self) -> Path:
        return self.dir / "terms.jsonl"

    def exists(self) -> bool:
        return self.state_file.exists()

    def load(self) -> ClientState:
        """The saved state, or a fresh one (a new workspace id) if there is none yet."""
        if not self.state_file.exists():
            return ClientState(str(self.workspace), str(uuid.uuid4()))
        try:
            data = json.loads(self.state_file.read_text())
            return ClientState(**data)
        except (ValueError, TypeError) as exc:
            raise IndexClientError(
                f"the index state {self.state_file} is damaged ({exc}); remove {self.dir} "
                "(the server's copy then stays orphaned until erased there) and sync again"
            ) from exc

    def save(self, state: ClientState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durably(self.state_file, json.dumps(asdict(state), indent=1).encode())

    def obfuscator(self) -> PathObfuscator:
        """The workspace's path obfuscator; its key is made on first use."""
        return PathObfuscator(load_or_create_key(self.key_file))

    def forget(self) -> None:
        """Remove the whole state folder (key, cache and workspace id)."""
        shutil.rmtree(self.dir, ignore_errors=True)
