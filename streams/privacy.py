"""Privacy at the source: what the telemetry SDK does to an event before it leaves the process.

* ids become keyed pseudonyms (`Pseudonymizer`): stable per key, so joins still work, and
  meaningless without the key;
* code text is dropped in privacy mode, and otherwise has its secrets redacted
  (`apply_privacy`, built on `streams.redaction.redact_secrets`).
"""

from __future__ import annotations

import hashlib
import hmac
import re

from streams.errors import PrivacyError
from streams.redaction import Redaction, redact_secrets

__all__ = ["PrivacyError", "Pseudonymizer", "Redaction", "apply_privacy", "redact_secrets"]

MIN_KEY_BYTES = 16
PSEUDONYM_BYTES = 16  # 128 bits of HMAC-SHA256: collision-free at any realistic id count

_KIND = re.compile(r"[a-z][a-z0-9_]*")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")
_KEY_FIX = (
    "set FLYWHEEL_PSEUDONYM_KEY to a hex string or any string of at least "
    f"{MIN_KEY_BYTES} bytes (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)"
)


_CACHE_LIMIT = 65_536


class Pseudonymizer:
    """Keyed, deterministic pseudonyms for ids: `user:<32 hex>`, `repo:<32 hex>`.

    The pseudonym is HMAC-SHA256(key, kind + "\\0" + raw_id) truncated to 16 bytes, so the same
    id maps to the same pseudonym under one key, to unrelated ones under another key or another
    kind, and cannot be reversed or recomputed without the key.
    """

    __slots__ = ("_cache", "_mac", "_pseudonymised")

    def __init__(self, key: bytes) -> None:
        """Raises `PrivacyError` when `key` is shorter than `MIN_KEY_BYTES` (empty included)."""
        if len(key) < MIN_KEY_BYTES:
            what = "empty" if not key else f"{len(key)} bytes, fewer than {MIN_KEY_BYTES}"
            raise PrivacyError(f"the pseudonymisation key is {what}: {_KEY_FIX}")
        self._mac = hmac.new(bytes(key), digestmod=hashlib.sha256)
        self._pseudonymised: dict[str, re.Pattern[str]] = {}
        # Clients see few distinct users and repos: memoise the HMACs (bounded, cleared at the cap).
        self._cache: dict[tuple[str, str], str] = {}

    @classmethod
    def from_secret(cls, text: str) -> Pseudonymizer:
        """A pseudonymizer from a configured secret: hex (decoding to at least `MIN_KEY_BYTES`)
        is decoded, anything else is used as UTF-8 text. Surrounding whitespace is ignored.

        Raises `PrivacyError` when the secret is empty or too short.
        """
        secret = text.strip()
        if _HEX.fullmatch(secret) and len(secret) >= 2 * MIN_KEY_BYTES:
            return cls(bytes.fromhex(secret))
        return cls(secret.encode("utf-8", "surrogatepass"))

    def pseudonym(self, kind: str, raw_id: str) -> str:
        """`<kind>:<32 hex>` for `raw_id`; an id already pseudonymised for `kind` is returned
        unchanged, so re-sending a spooled event never hashes twice.

        Raises `PrivacyError` when `kind` is not a lowercase name (`user`, `repo`, `org_unit`).
        """
        cached = self._cache.get((kind, raw_id))
        if cached is not None:
            return cached
        if not _KIND.fullmatch(kind):
            raise PrivacyError(f"pseudonym kind {kind!r} must be a lowercase name like 'user'")
        pattern = self._pseudonymised.get(kind)
        if pattern is None:
            pattern = self._pseudonymised[kind] = re.compile(rf"{kind}:[0-9a-f]{{32}}")
        if pattern.fullmatch(raw_id):
            return raw_id
        mac = self._mac.copy()  # the keyed state is computed once; copying it is cheap
        mac.update(f"{kind}\0{raw_id}".encode("utf-8", "surrogatepass"))
        pseudonym = f"{kind}:{mac.digest()[:PSEUDONYM_BYTES].hex()}"
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[(kind, raw_id)] = pseudonym
        return pseudonym

    def __repr__(self) -> str:
        return "Pseudonymizer(key=***)"


def apply_privacy(text: str | None, privacy_mode: bool) -> str | None:
    """The code text that may leave the process: None in privacy mode (no code at all), else
    `text` with its secrets redacted. None stays None. Never raises."""
    if privacy_mode or text is None:
        return None
    return redact_secrets(text).text
