"""Path obfuscation: each segment of a workspace-relative path through a keyed hash
(docs/index.md, "Hashes"), so the server never sees a real file or folder name.

`hmac_sha256(key, segment)` cut to 20 hex digits (80 bits: no collision among a workspace's
names in practice). The key is 32 random bytes made at the first sync, kept mode 0600 in the
client's state folder and never sent: without it the server cannot test a guessed name either.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from codeindex.client.errors import IndexClientError

KEY_BYTES = 32
SEGMENT_HEX = 20


def load_or_create_key(path: Path) -> bytes:
    """The obfuscation key kept (hex) at `path`; made with `secrets` and written mode 0600
    (its folder 0700) if there is none. Raises IndexClientError for a damaged key file."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another sync of the same workspace made it first
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(KEY_BYTES))
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise IndexClientError(
            f"the index key {path} is damaged (not {KEY_BYTES} bytes in hex); "
            "`flywheel index erase` the workspace and sync it again"
        )
    return key


class PathObfuscator:
    """Obfuscates workspace-relative POSIX paths segment by segment (segments memoized)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("an obfuscation key has at least 16 bytes")
        self._key = key
        self._segments: dict[str, str] = {}

    @property
    def key_id(self) -> str:
        """Names the key without revealing it (the chunk cache checks its root against it)."""
        return hmac.digest(self._key, b"\0key id", "sha256").hex()[:16]

    def segment(self, name: str) -> str:
        obf = self._segments.get(name)
        if obf is None:
            digest = hmac.digest(self._key, name.encode("utf-8"), "sha256")  # the fast C path
            obf = self._segments[name] = digest.hex()[:SEGMENT_HEX]
        return obf

    def path(self, rel: str) -> str:
        """`src/app/models.py` → three obfuscated segments joined with `/`."""
        return "/".join(self.segment(s) for s in rel.split("/"))

    def path_map(self, rels: Iterable[str]) -> dict[str, str]:
        """Obfuscated path → real path of each of `rels`: the client's way back from a
        search result (kept in memory, never sent)."""
        return {self.path(rel): rel for rel in rels}
