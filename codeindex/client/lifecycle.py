"""A synced workspace's status and erasure, from the client's side."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from codeindex.client.api import IndexClient, IndexServerError
from codeindex.client.errors import IndexClientError
from codeindex.client.state import WorkspaceState


def status(
    workspace: Path,
    url: str,
    api_key: str | None,
    *,
    state_root: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the local state, the server's status of the workspace or None if it does not know
    it). Raises IndexClientError if the workspace was never synced or the server fails."""
    store = _synced(workspace, state_root)
    state = store.load()
    local = {**asdict(state), "state_dir": str(store.dir)}
    with IndexClient(url, api_key, state.workspace_id, transport=transport) as client:
        try:
            return local, client.status()
        except IndexServerError as exc:
            if exc.status == 404:
                return local, None
            raise


def erase(
    workspace: Path,
    url: str,
    api_key: str | None,
    *,
    state_root: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> bool:
    """Erase the workspace on the server (`DELETE`), then the client's state (key, cache,
    workspace id): whether the server held it. The local state stays if the server fails, so
    the erase can be retried."""
    store = _synced(workspace, state_root)
    state = store.load()
    with IndexClient(url, api_key, state.workspace_id, transport=transport) as client:
        try:
            held = client.erase().get("erased") is not False
        except IndexServerError as exc:
            if exc.status != 404:
                raise
            held = False
    store.forget()
    return held


def _synced(workspace: Path, state_root: Path | None) -> WorkspaceState:
    store = WorkspaceState(workspace, state_root)
    if not store.exists():
        raise IndexClientError(
            f"{store.workspace} has no index state ({store.dir}); "
            f"run `flywheel index sync {workspace}` first"
        )
    return store
