"""Serving the agent model, the sessions section of ``bench/serving.py``: concurrent clients
running multi-turn chat sessions through the OpenAI API against the continuous-batching engine
vs the engine before it, same model, same run, alternating rounds.

    .venv/bin/python -m bench.serving --sections sessions [--clients 16] [--sessions 16]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import torch
import uvicorn

from bench.serving import StandIn, code_corpus, median_pair
from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine
from fleet.prefix_cache import PrefixCache
from fleet.rollout_worker import AgentPolicy
from flywheel.listen import listen
from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer


def chat_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The default-size agent LM with the chat template (random weights: the bench measures
    the engine, not the text)."""
    tokenizer = train_tokenizer(code_corpus(1000), 512, chat=True)
    torch.manual_seed(0)
    model = build_model(AgentModelConfig(max_positions=2048), tokenizer)
    return model.to(args.device, getattr(torch, args.dtype)).eval(), tokenizer


def serve_app(engine: Engine, model: Any, tokenizer: Any) -> tuple[uvicorn.Server, str]:
    """The OpenAI API over ``engine`` on a free local port, started; (server, base url)."""
    app = create_agent_app(StandIn(AgentPolicy(model, tokenizer)), engine, lambda _: None,
                           keys=None, producer="bench/serving")  # fmt: skip
    sock = listen("127.0.0.1", 0)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not uv.started:
        time.sleep(0.01)
    return uv, f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"


def chat_turn(
    client: httpx.Client, url: str, messages: list[dict[str, str]]
) -> tuple[str, int, float]:
    """One streamed turn: (completion text, completion tokens, seconds to the first text)."""
    body = {"model": "agent-lm", "messages": messages, "max_tokens": 48, "temperature": 0.6,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    started, first, text, tokens = time.perf_counter(), None, [], 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                if choice["delta"].get("content"):
                    first = first or time.perf_counter() - started
                    text.append(choice["delta"]["content"])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return "".join(text), tokens, first if first is not None else time.perf_counter() - started


def session_scripts(count: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """(opening ~150 tokens, 3-5 observations of ~40 tokens) per session: 4-6 turns each."""
    rng = random.Random(seed)
    codes = code_corpus(400, "eval")
    return [
        ("".join(rng.sample(codes, 8))[:450],
         [f"# observation: {rng.choice(codes)[:110]}" for _ in range(rng.randint(3, 5))])
        for _ in range(count)
    ]  # fmt: skip


def sessions(args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer = chat_model(args)
    scripts = session_scripts(args.sessions)
    engines = {
        "today": Engine(max_batch_rows=16, prefix_cache=PrefixCache(), continuous=False),
        "continuous": Engine(max_batch_rows=16, prefix_cache=PrefixCache()),
    }
    servers = {name: serve_app(engine, model, tokenizer) for name, engine in engines.items()}
    for engine in engines.values():
        engine.start()
    clients = [httpx.Client(timeout=600) for _ in range(args.clients)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in engines}

    def run_sessions(name: str) -> float:
        url, ttfts, tokens = servers[name][1], [], []
        todo = list(range(len(scripts)))
        lock = threading.Lock()

        def client(c: int) -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    opening, observations = scripts[todo.pop()]
                messages = [{"role": "system", "content": "You edit this code."},
                            {"role": "user", "content": opening}]  # fmt: skip
                for observation in [*observations, None]:
                    text, count, ttft = chat_turn(clients[c], url, messages)
                    with lock:
                        ttfts.append(ttft)
                        tokens.append(count)
                    if observation is None:
                        break
                    messages += [{"role": "assistant", "content": text},
                                 {"role": "user", "content": observation}]  # fmt: skip

        started = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(client, range(args.clients)))
        wall = time.perf_counter() - started
        runs[name].append({
            "sessions_s": len(scripts) / wall, "tokens_s": sum(tokens) / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p99_ms": 1000 * statistics.quantiles(ttfts, n=100, method="inclusive")[98],
            "turns": len(ttfts),
        })  # fmt: skip
        return runs[name][-1]["sessions_s"]

    try:
        plain, fast = median_pair(
            args.rounds, lambda: run_sessions("today"), lambda: run_sessions("continuous")
        )
    finally:
        for uv, _ in servers.values():
            uv.should_exit = True
        for engine in engines.values():
            engine.close()
        for http in clients:
            http.close()
    report: dict[str, Any] = {"clients": args.clients, "sessions": len(scripts),
                              "rounds": args.rounds, "ratio": fast / plain}  # fmt: skip
    for name, measured in runs.items():
        timed = measured[1:]  # after the warm-up
        report[name] = {key: statistics.median(r[key] for r in timed) for key in timed[0]}
    report["continuous"]["mean_rows_per_step"] = engines["continuous"].stats.sequences / max(
        engines["continuous"].stats.batches, 1
    )
    return report


def print_sessions(report: dict[str, Any]) -> None:
    print(f"sessions, {report['clients']} clients, {report['sessions']} sessions of 4-6 turns "
          f"({report['today']['turns']:.0f} turns), 48 tokens, temperature 0.6:")  # fmt: skip
    for name, label in (("today", "one generate per batch"), ("continuous", "continuous batching")):
        r = report[name]
        print(f"  {label:<22}: {r['sessions_s']:6.2f} sessions/s {r['tokens_s']:8,.0f} tokens/s  "
              f"TTFT p50 {r['ttft_p50_ms']:7,.0f} ms p99 {r['ttft_p99_ms']:7,.0f} ms")  # fmt: skip
    print(f"  ratio {report['ratio']:.2f} (>= 2); mean rows per continuous step "
          f"{report['continuous']['mean_rows_per_step']:.1f}")  # fmt: skip
