"""Serving the agent model: each fast-inference technique against plain decoding of the same
model in the same run (issue: the agent loop, part 3).

    .venv/bin/python -m bench.serving [--rounds 3] [--copy-steps 1000] [--sections sessions]
    .venv/bin/python -m bench.serving --device cuda --dtype bfloat16  # on a GPU

* **speculative edits**: edit requests (a program, then "rewrite it"), greedy; the engine's
  prompt-lookup decoding (the original code in the prompt is the draft) vs plain decoding, on
  a model trained here for a few minutes to reproduce code it is shown (cached under
  ``$FLYWHEEL_HOME/bench/serving-copy-model``; a random model never copies, so no draft would
  be accepted). Outputs must be identical; tokens/s compared (target >= 2x).
* **prefix cache**: time to first token of requests sharing a 1,024-token prefix with an
  earlier one, with the cache vs without (target >= 3x faster).
* **GQA / MQA, MoE**: KV-cache bytes per token measured on the cache (MHA vs GQA = heads /
  kv-heads) and generated tokens/s of MHA, GQA, MQA, and of dense vs mixture-of-experts at
  equal active parameters.
* **the server**: requests/s of the OpenAI API (uvicorn, HTTP, JSON, batching engine; a
  stand-in replica, events to memory) under concurrent clients vs calling ``generate``
  in-process on batches of the same prompts and budget (target >= 0.7x).
* **sessions**: ``--clients`` concurrent clients each running multi-turn chat sessions through
  ``/v1/chat/completions`` (streamed; each turn's prompt is the last one, its completion and a
  ~40-token observation, from ~150 tokens; 4-6 turns; temperature 0.6, 48 tokens) against the
  continuous-batching engine vs the engine before it (``Engine(continuous=False)``: one
  ``generate`` per batch, long prompts alone), both with the prefix cache as ``flywheel serve``
  has it; sessions/s, generated tokens/s, time to first token p50/p99 (target >= 2x sessions/s).

Every pair alternates for ``--rounds`` rounds after a warm-up; medians are compared.
``--sections`` runs some of them (speculative, prefix, archs, server, sessions; default all).
Prints a table and writes ``$FLYWHEEL_HOME/bench/serving.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import torch
import uvicorn

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import Split
from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine, Job
from fleet.prefix_cache import PrefixCache
from fleet.rollout_worker import AgentPolicy
from fleet.subscriber import Routed, ServedModel, ServingSnapshot
from flywheel.listen import listen
from flywheel.settings import Settings
from policies.agent_lm import (
    AgentModelConfig,
    build_model,
    kv_cache_bytes_per_token,
    load_checkpoint,
    parameter_count,
    save_checkpoint,
    train_tokenizer,
)
from policies.agent_sampling import SamplingParams, sample
from schemas.enums import Channel

EDIT_MARK = "### the same code, rewritten:\n"


def median_pair(
    rounds: int, plain: Callable[[], float], fast: Callable[[], float]
) -> tuple[float, float]:
    """Medians of ``rounds`` alternating calls of each (after one warm-up call of each)."""
    plain(), fast()
    a, b = [], []
    for _ in range(rounds):
        a.append(plain())
        b.append(fast())
    return statistics.median(a), statistics.median(b)


# Speculative edits -------------------------------------------------------------------------


def code_corpus(n: int, split: Split = "train") -> list[str]:
    """Programs (task prompt and solution) of the program-synthesis environment."""
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    return [env.reset(t) + env.solution(t) for t in env.tasks(split, n)]  # type: ignore[attr-defined]


def copy_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """A 2-layer agent LM trained to reproduce a program after EDIT_MARK (cached)."""
    path = Settings.from_env().home / "bench" / f"serving-copy-model-{args.copy_steps}"
    if (path / "config.json").is_file():
        return load_checkpoint(path, device=args.device, dtype=getattr(torch, args.dtype))
    codes = code_corpus(2000)
    tokenizer = train_tokenizer(codes, 512)
    mark = tokenizer(EDIT_MARK, add_special_tokens=False)["input_ids"]
    bodies = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in codes]
    torch.manual_seed(0)
    model = build_model(AgentModelConfig(layers=2, max_positions=512), tokenizer).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    started = time.monotonic()
    for step in range(args.copy_steps):
        rows = []
        for _ in range(32):  # half programs, half random tokens: copying, not memorising
            body = rng.choice(bodies) if rng.random() < 0.5 else [
                rng.randrange(3, 512) for _ in range(rng.randrange(10, 60))
            ]  # fmt: skip
            rows.append((body, [*body, *mark, *body]))
        width = max(len(r) for _, r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for _, r in rows], device=args.device)
        labels = torch.full_like(ids, -100)
        for i, (body, row) in enumerate(rows):
            labels[i, len(body) + len(mark) : len(row)] = ids[i, len(body) + len(mark) : len(row)]
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == args.copy_steps - 1:
            print(f"  copy model step {step}: loss {loss.item():.3f} "
                  f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    save_checkpoint(model.cpu(), tokenizer, path)
    return load_checkpoint(path, device=args.device, dtype=getattr(torch, args.dtype))


def speculative_edits(args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer = copy_model(args)
    edits = code_corpus(args.edits, "eval")
    prompts = [tokenizer(c + EDIT_MARK, add_special_tokens=False)["input_ids"] for c in edits]
    budgets = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in edits]
    engine = Engine()
    outputs: dict[bool, list[tuple[int, ...]]] = {}

    def run(speculative: bool) -> float:
        started, tokens, out = time.perf_counter(), 0, []
        for prompt, budget in zip(prompts, budgets, strict=True):
            greedy = SamplingParams(temperature=0.0, max_new_tokens=budget)
            job = Job(model, tokenizer, prompt, greedy, speculative=speculative)
            engine.run([job])
            tokens += len(job.choices[0].token_ids)
            out.append(tuple(job.choices[0].token_ids))
        outputs[speculative] = out
        return tokens / (time.perf_counter() - started)

    plain, fast = median_pair(args.rounds, lambda: run(False), lambda: run(True))
    copied = sum(
        tokenizer.decode(o, skip_special_tokens=True) == c
        for o, c in zip(outputs[False], edits, strict=True)
    )
    return {
        "plain_tok_s": plain,
        "speculative_tok_s": fast,
        "ratio": fast / plain,
        "identical": outputs[False] == outputs[True],
        "edits": len(edits),
        "copied_exactly": copied,
    }


# Prefix cache ------------------------------------------------------------------------------


def long_model(args: argparse.Namespace) -> tuple[Any, Any]:
    tokenizer = train_tokenizer(code_corpus(1000), 512)
    torch.manual_seed(0)
    model = build_model(AgentModelConfig(max_positions=2048), tokenizer)
    return model.to(args.device, getattr(torch, args.dtype)).eval(), tokenizer


def prefix_cache(args: argparse.Namespace, model: Any, tokenizer: Any) -> dict[str, Any]:
    text = "".join(code_corpus(200, "eval"))
    prefix = tokenizer(text, add_special_tokens=False)["input_ids"][:1024]
    suffixes = [tokenizer(f"# request {i}: f(x) ==", add_special_tokens=False)["input_ids"]
                for i in range(8)]  # fmt: skip
    one = SamplingParams(temperature=0.0, max_new_tokens=1)
    plain_engine, cached_engine = Engine(), Engine(prefix_cache=PrefixCache(min_tokens=64))
    cached_engine.run([Job(model, tokenizer, [*prefix, 3], one)])  # an earlier request

    def ttft(engine: Engine) -> float:
        times = []
        for suffix in suffixes:
            job = Job(model, tokenizer, [*prefix, *suffix], one)
            engine.run([job])
            assert job.first_token_at is not None
            times.append(job.first_token_at - job.submitted_at)
        return statistics.median(times)

    plain, cached = median_pair(
        args.rounds, lambda: ttft(plain_engine), lambda: ttft(cached_engine)
    )
    return {
        "prefix_tokens": len(prefix),
        "ttft_plain_ms": plain * 1000,
        "ttft_cached_ms": cached * 1000,
        "speedup": plain / cached,
    }


# Attention and experts ---------------------------------------------------------------------


def architectures(args: argparse.Namespace, tokenizer: Any) -> list[dict[str, Any]]:
    shapes = {
        "MHA (4 kv heads)": AgentModelConfig(kv_heads=4),
        "GQA (2 kv heads)": AgentModelConfig(kv_heads=2),
        "MQA (1 kv head)": AgentModelConfig(kv_heads=1),
        "dense, MLP 224": AgentModelConfig(kv_heads=2, intermediate_size=224),
        "MoE 8 x 112, top-2": AgentModelConfig(
            architecture="qwen3_moe",
            kv_heads=2,
            experts=8,
            experts_per_token=2,
            expert_intermediate_size=112,
        ),
    }
    prompts = code_corpus(8, "eval")
    params = SamplingParams(temperature=0.0, max_new_tokens=args.tokens)
    dtype = getattr(torch, args.dtype)
    rows = []
    for name, config in shapes.items():
        torch.manual_seed(0)
        model = build_model(config, tokenizer).to(args.device, dtype).eval()
        enc = tokenizer(prompts[:1], return_tensors="pt", add_special_tokens=False).to(args.device)
        with torch.inference_mode():
            cache = model(**enc, use_cache=True).past_key_values
        held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
        per_token = held / enc["input_ids"].shape[1]

        def rate(model: Any = model) -> float:
            started = time.perf_counter()
            groups = sample(model, tokenizer, prompts, 1, params)
            return sum(len(g[0].token_ids) for g in groups) / (time.perf_counter() - started)

        rate()  # warm-up
        tok_s = statistics.median(rate() for _ in range(args.rounds))
        total = parameter_count(model)
        active = total
        if config.architecture == "qwen3_moe":  # experts not chosen for a token do no work
            per_expert = 3 * config.hidden_size * config.expert_intermediate_size
            active -= config.layers * per_expert * (config.experts - config.experts_per_token)
        rows.append({
            "name": name, "kv_bytes_per_token": per_token,
            "kv_bytes_formula": kv_cache_bytes_per_token(config, dtype_bytes=dtype.itemsize),
            "tok_s": tok_s, "params": total, "active_params": active,
        })  # fmt: skip
    return rows


# The server --------------------------------------------------------------------------------


class StandIn:
    """A replica serving one loaded model (no Kafka: the bench measures the HTTP path)."""

    model_name = "agent-lm"
    replica_id = "bench"
    rejected = 0

    def __init__(self, policy: AgentPolicy) -> None:
        self.policy = policy
        self.snapshot = ServingSnapshot(ServedModel(Channel.PRODUCTION, 1, policy, "0" * 64, 1.0))
        self.serving_version = 1

    def route(self, _user: str) -> Routed[Any]:
        return Routed(Channel.PRODUCTION, 1, self.policy)


def server(args: argparse.Namespace, model: Any, tokenizer: Any) -> dict[str, Any]:
    prompts = [c[:200] for c in code_corpus(args.requests, "eval")]
    budget = 16
    batch = args.concurrency
    engine = Engine(max_batch_rows=batch, batch_wait_s=0.01)
    engine.start()
    events: list[Any] = []
    app = create_agent_app(StandIn(AgentPolicy(model, tokenizer)), engine, events.append,
                           keys=None, producer="bench/serving")  # fmt: skip
    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/completions"
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.01)
    clients = [httpx.Client(timeout=60) for _ in range(batch)]
    params = SamplingParams(temperature=0.0, max_new_tokens=budget)

    def over_http() -> float:
        def one(i: int) -> None:
            body = {"model": "agent-lm", "prompt": prompts[i], "max_tokens": budget,
                    "temperature": 0}  # fmt: skip
            response = clients[i % batch].post(url, json=body)
            response.raise_for_status()

        started = time.perf_counter()
        with ThreadPoolExecutor(batch) as pool:
            list(pool.map(one, range(len(prompts))))
        return len(prompts) / (time.perf_counter() - started)

    def in_process() -> float:
        started = time.perf_counter()
        for i in range(0, len(prompts), batch):
            sample(model, tokenizer, prompts[i : i + batch], 1, params)
        return len(prompts) / (time.perf_counter() - started)

    try:
        plain, served = median_pair(args.rounds, in_process, over_http)
    finally:
        uv.should_exit = True
        thread.join(10)
        engine.close()
        for client in clients:
            client.close()
    return {
        "requests": len(prompts),
        "concurrency": batch,
        "in_process_req_s": plain,
        "server_req_s": served,
        "ratio": served / plain,
        "mean_batch": engine.stats.sequences / max(engine.stats.batches, 1),
    }


SECTIONS = ("speculative", "prefix", "archs", "server", "sessions")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copy-steps", type=int, default=1000,
                        help="training steps of the copying model (cached per value)")  # fmt: skip
    parser.add_argument("--edits", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48, help="tokens per sequence (archs)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--clients", type=int, default=16, help="concurrent session clients")
    parser.add_argument("--sessions", type=int, default=32, help="sessions per round")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"device": args.device, "dtype": args.dtype}
    if "speculative" in args.sections:
        print("speculative edits (training the copying model on first use)...", flush=True)
        report["speculative_edits"] = speculative_edits(args)
    if {"prefix", "archs", "server"} & set(args.sections):
        model, tokenizer = long_model(args)
        if "prefix" in args.sections:
            print("prefix cache...", flush=True)
            report["prefix_cache"] = prefix_cache(args, model, tokenizer)
        if "archs" in args.sections:
            print("attention and experts...", flush=True)
            report["architectures"] = architectures(args, tokenizer)
        if "server" in args.sections:
            print("the server...", flush=True)
            report["server"] = server(args, model, tokenizer)
    if "sessions" in args.sections:
        from bench.serving_sessions import print_sessions, sessions

        print("sessions...", flush=True)
        report["sessions"] = sessions(args)
    out = Settings.from_env().home / "bench" / "serving.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nserving bench on {args.device} {args.dtype} ({args.rounds} rounds, medians):")
    print_report(report)
    if "sessions" in report:
        print_sessions(report["sessions"])
    print(f"written to {out}")


def print_report(report: dict[str, Any]) -> None:
    """The table of the sections run before the sessions."""
    if spec := report.get("speculative_edits"):
        print(f"speculative edits, {spec['edits']} edit requests ({spec['copied_exactly']} copied "
              f"exactly), identical output: {spec['identical']}")  # fmt: skip
        print(f"  plain greedy        : {spec['plain_tok_s']:10,.0f} tokens/s")
        print(f"  prompt lookup       : {spec['speculative_tok_s']:10,.0f} tokens/s  "
              f"ratio {spec['ratio']:.2f} (>= 2)")  # fmt: skip
    if prefix := report.get("prefix_cache"):
        print(f"time to first token, {prefix['prefix_tokens']}-token shared prefix:")
        print(f"  no cache            : {prefix['ttft_plain_ms']:10.2f} ms")
        print(f"  prefix cache        : {prefix['ttft_cached_ms']:10.2f} ms  "
              f"{prefix['speedup']:.1f}x faster (>= 3)")  # fmt: skip
    if archs := report.get("architectures"):
        print("attention and experts (KV bytes/token measured | formula, tokens/s, params "
              "active/all):")  # fmt: skip
        for row in archs:
            print(f"  {row['name']:<20}: {row['kv_bytes_per_token']:7,.0f} | "
                  f"{row['kv_bytes_formula']:5,} B  {row['tok_s']:8,.0f} tok/s  "
                  f"{row['active_params'] / 1e6:.2f}M / {row['params'] / 1e6:.2f}M")  # fmt: skip
        mha, gqa, mqa = (archs[i]["kv_bytes_per_token"] for i in range(3))
        print(f"  KV bytes MHA/GQA = {mha / gqa:.1f} (heads/kv-heads = 2), "
              f"MHA/MQA = {mha / mqa:.1f} (4)")  # fmt: skip
    if serve := report.get("server"):
        print(f"server, {serve['requests']} requests x 16 tokens, {serve['concurrency']} clients "
              f"(mean engine batch {serve['mean_batch']:.1f}):")  # fmt: skip
        print(f"  generate in-process : {serve['in_process_req_s']:10,.1f} requests/s")
        print(f"  OpenAI API server   : {serve['server_req_s']:10,.1f} requests/s  "
              f"ratio {serve['ratio']:.2f} (>= 0.7)")  # fmt: skip


if __name__ == "__main__":
    main()
