"""The API key store: hashed at rest, 0600, revocation, permissions, reload on change."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from streams.gateway.errors import KeyStoreError
from streams.gateway.keys import ApiKeyStore, default_key_path, hash_secret
from streams.gateway.parsing import GATEWAY_EVENT_TYPES


@pytest.fixture
def store(tmp_path: Path) -> ApiKeyStore:
    return ApiKeyStore(default_key_path(tmp_path))


def test_default_path_is_under_flywheel_home(tmp_path: Path) -> None:
    assert default_key_path(tmp_path) == tmp_path / "gateway" / "keys.json"


def test_a_new_key_authenticates_and_only_its_hash_is_stored(store: ApiKeyStore) -> None:
    secret = store.add("ide-fleet")
    assert secret.startswith("fw_")
    assert len(secret) > 40
    record = store.authenticate(secret)
    assert record is not None
    assert record.name == "ide-fleet"
    assert not record.revoked
    assert record.event_types == tuple(GATEWAY_EVENT_TYPES)
    text = store.path.read_text()
    assert secret not in text
    assert hash_secret(secret) in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_wrong_secrets_do_not_authenticate(store: ApiKeyStore) -> None:
    secret = store.add("k1")
    for wrong in ["", secret[:-1], secret + "x", "fw_nope", hash_secret(secret)]:
        assert store.authenticate(wrong) is None


def test_an_empty_store_authenticates_nobody(store: ApiKeyStore) -> None:
    assert store.records() == []
    assert store.authenticate("fw_anything") is None


def test_keys_are_limited_to_their_event_types(store: ApiKeyStore) -> None:
    secret = store.add("agents", ["RolloutResult"])
    record = store.authenticate(secret)
    assert record is not None
    assert record.allows("RolloutResult")
    assert not record.allows("SuggestionOffered")


@pytest.mark.parametrize("types", [["Reward"], ["SuggestionOffered", "Nope"], []])
def test_unknown_event_types_are_refused(store: ApiKeyStore, types: list[str]) -> None:
    with pytest.raises(KeyStoreError, match="the gateway accepts SuggestionOffered"):
        store.add("k1", types)


@pytest.mark.parametrize("name", ["", "has space", "../etc", "-leading", "x" * 65])
def test_bad_names_are_refused(store: ApiKeyStore, name: str) -> None:
    with pytest.raises(KeyStoreError, match="is not allowed"):
        store.add(name)


def test_names_are_unique(store: ApiKeyStore) -> None:
    store.add("k1")
    with pytest.raises(KeyStoreError, match="already exists"):
        store.add("k1")


def test_revoked_keys_are_known_but_marked(store: ApiKeyStore) -> None:
    secret = store.add("k1")
    other = store.add("k2")
    assert store.revoke("k1").revoked
    assert store.revoke("k1").revoked  # idempotent
    revoked = store.authenticate(secret)
    assert revoked is not None
    assert revoked.revoked
    still = store.authenticate(other)
    assert still is not None
    assert not still.revoked
    assert [(r.name, r.revoked) for r in store.records()] == [("k1", True), ("k2", False)]


def test_revoking_an_unknown_key_names_the_known_ones(store: ApiKeyStore) -> None:
    store.add("k1")
    with pytest.raises(KeyStoreError, match=r"no key named 'k9'.*keys: k1"):
        store.revoke("k9")


def test_changes_by_another_process_are_seen_without_restart(store: ApiKeyStore) -> None:
    secret = store.add("k1")
    assert store.authenticate(secret) is not None
    other_process = ApiKeyStore(store.path)  # e.g. `flywheel gateway revoke-key` meanwhile
    other_process.revoke("k1")
    new_secret = other_process.add("k2")
    revoked = store.authenticate(secret)
    assert revoked is not None
    assert revoked.revoked
    assert store.authenticate(new_secret) is not None


def test_a_corrupt_file_is_a_clear_error(store: ApiKeyStore) -> None:
    store.add("k1")
    store.path.write_text("{not json")
    with pytest.raises(KeyStoreError, match="cannot read the API key file"):
        store.records()
    store.path.write_text(json.dumps({"version": 1, "keys": [{"name": "x"}]}))
    with pytest.raises(KeyStoreError, match="flywheel gateway add-key"):
        store.authenticate("fw_x")
