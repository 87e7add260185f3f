"""The HTTP lookups, through Starlette's TestClient."""

from __future__ import annotations

from starlette.testclient import TestClient

from feature_store.declarations import load_features
from feature_store.online import OnlineFeatureStore
from feature_store.service import create_app
from tests.feature_store.feature_events import HOUR_MS, T0_MS, reward


def client(ready: bool = True) -> TestClient:
    store = OnlineFeatureStore(load_features(), history_ms=HOUR_MS)
    store.ingest(
        "rewards",
        [
            reward(T0_MS, accepted=True, language="python"),
            reward(T0_MS + 1, accepted=False, language="go"),
            reward(T0_MS + 2, user="user:b", model_version=2),
        ],
    )
    return TestClient(create_app(store, ready=lambda: ready))


def test_get_one_entity_all_or_some_features() -> None:
    http = client()
    body = http.get("/features/user/user:a").json()
    assert body["as_of_ms"] == T0_MS + 2
    assert body["features"]["user.accept_rate_24h"] == {"value": 0.5, "count": 2}
    assert len(body["features"]) == 4
    some = http.get("/features/user_language/user:a@python?features=accept_rate_24h").json()
    assert some["features"] == {"user_language.accept_rate_24h": {"value": 1.0, "count": 1}}
    early = http.get(f"/features/user/user:a?as_of={T0_MS}&features=requests_24h").json()
    assert early["features"]["user.requests_24h"]["value"] == 1.0
    iso = http.get("/features/model_version/suggestion-gate@2?as_of=2026-01-01T00:00:00.002Z")
    assert iso.json()["features"]["model_version.reward_mean_1h"]["value"] == -0.25


def test_post_many_in_order_with_unknown_ids_undefined() -> None:
    http = client()
    answer = http.post(
        "/features/user",
        json={"ids": ["user:b", "user:zz", "user:a"], "features": ["requests_24h"]},
    )
    assert answer.status_code == 200
    values = [e["features"]["user.requests_24h"]["value"] for e in answer.json()["entities"]]
    assert values == [1.0, None, 2.0]
    assert http.post("/features/repo", json=["repo:x"]).json()["entities"][0]["features"] == {
        "repo.requests_24h": {"value": 3.0, "count": 3}
    }


def test_bad_input_gets_clear_errors() -> None:
    http = client()
    unknown_type = http.get("/features/team/t1")
    assert unknown_type.status_code == 404
    assert "unknown entity type 'team'" in unknown_type.json()["error"]
    unknown_feature = http.get("/features/user/user:a?features=nope")
    assert unknown_feature.status_code == 404 and "user.nope" in unknown_feature.json()["error"]
    assert http.get("/features/user/user:a?as_of=yesterday").status_code == 400
    too_old = http.get(f"/features/user/user:a?as_of={T0_MS - 2 * HOUR_MS}")
    assert too_old.status_code == 400 and "historical_features" in too_old.json()["error"]
    assert http.post("/features/user", content=b"{not json").status_code == 400
    assert http.post("/features/user", json={"ids": [1, 2]}).status_code == 400
    assert http.post("/features/team", json=["x"]).status_code == 404


def test_healthz_and_declarations() -> None:
    assert client().get("/healthz").json()["status"] == "ok"
    starting = client(ready=False).get("/healthz")
    assert starting.status_code == 503 and starting.json()["status"] == "catching_up"
    names = [f["name"] for f in client().get("/features").json()["features"]]
    assert "user.accept_rate_24h" in names
