"""Online feature lookup latency: Python API and HTTP (uvicorn), p50 / p99.

    .venv/bin/python -m bench.features [--users 10000] [--events 300000] [--lookups 20000]

Builds an OnlineFeatureStore from synthetic tab@1 rewards (no broker), then times single and
batched lookups in-process, the simulator's path (online_features + feature_matrix for a batch),
and GET / POST over HTTP to a real uvicorn server on loopback with a keep-alive client.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import uvicorn

from feature_store import OnlineFeatureStore, feature_matrix, load_features, online_features
from feature_store.service import create_app
from schemas.enums import Decision, RewardSource

T0_MS = 1_767_225_600_000
USER_FEATURES = ["user.accept_rate_24h", "user.show_rate_24h", "user.reward_mean_24h"]


def synthetic_rewards(users: int, events: int, rng: random.Random) -> list[dict[str, Any]]:
    """Decoded-looking Reward dicts spread over 24 h (only the fields features read)."""
    out = []
    for k in range(events):
        shown = rng.random() < 0.7
        accepted = shown and rng.random() < 0.35
        out.append(
            {
                "event_time": T0_MS + k * (86_400_000 // events),
                "source": RewardSource.SUGGESTION.value,
                "reward_fn": "tab@1",
                "user_id": f"user:{rng.randrange(users):032x}",
                "repo_id": f"repo:{rng.randrange(users // 5 + 1):032x}",
                "language": rng.choice(["python", "go", "typescript", "rust"]),
                "model_name": "suggestion-gate",
                "model_version": 1,
                "decision": (Decision.SHOWN if shown else Decision.SUPPRESSED).value,
                "reward": 0.75 if accepted else (-0.25 if shown else 0.0),
                "reward_components": {"shown": float(shown), "accepted": float(accepted)},
            }
        )
    return out


def percentiles(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(p50, p99) in microseconds of ``n`` calls of ``fn`` after a short warm-up."""
    for _ in range(min(100, n)):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49], cuts[98]


def report(label: str, p: tuple[float, float]) -> None:
    print(f"{label:<52} p50 {p[0]:>9.1f} µs   p99 {p[1]:>9.1f} µs")


def serve(store: OnlineFeatureStore) -> tuple[str, uvicorn.Server]:
    sock = socket.socket()
    # Accepted sockets inherit it: without, Nagle + delayed ACK add ~40 ms to every response
    # after the first on a keep-alive connection (uvicorn writes headers and body apart).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    rng = random.Random(0)
    records = synthetic_rewards(args.users, args.events, rng)
    store = OnlineFeatureStore(load_features(), history_ms=3_600_000)
    start = time.perf_counter()
    store.ingest("rewards", records)
    ingest_s = time.perf_counter() - start
    rate = len(records) / ingest_s
    series = store.aggregator.series_count()
    print(f"ingest: {len(records):,} rewards in {ingest_s:.2f}s ({rate:,.0f}/s), {series:,} series")
    users = sorted({r["user_id"] for r in records})
    batch_rows = [
        {"user_id": rng.choice(users), "language": "python", "repo_id": records[0]["repo_id"],
         "model_name": "suggestion-gate", "model_version": 1}
        for _ in range(args.batch)
    ]  # fmt: skip
    ids = [r["user_id"] for r in batch_rows]

    report("python get(user, 3 features)", percentiles(
        lambda: store.get("user", rng.choice(users), USER_FEATURES), args.lookups))  # fmt: skip
    report(f"python get_many(user, {args.batch} ids, 3 features)", percentiles(
        lambda: store.get_many("user", ids, USER_FEATURES), args.lookups // 20))  # fmt: skip
    names = [*USER_FEATURES, "user_language.accept_rate_24h", "model_version.reward_mean_1h"]
    report(f"online_features+feature_matrix ({args.batch} rows, 5)", percentiles(
        lambda: feature_matrix(online_features(store, batch_rows, names), names),
        args.lookups // 20))  # fmt: skip

    base, server = serve(store)
    with httpx.Client(base_url=base) as http:
        query = "?features=" + ",".join(USER_FEATURES)
        report("http GET /features/user/<id> (3 features)", percentiles(
            lambda: http.get(f"/features/user/{rng.choice(users)}{query}").raise_for_status(),
            args.lookups // 4))  # fmt: skip
        body = {"ids": ids, "features": USER_FEATURES}
        report(f"http POST /features/user ({args.batch} ids)", percentiles(
            lambda: http.post("/features/user", json=body).raise_for_status(),
            args.lookups // 40))  # fmt: skip
    server.should_exit = True


if __name__ == "__main__":
    main()
