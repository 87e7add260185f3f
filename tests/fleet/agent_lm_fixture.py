"""A tiny agent LM for the serving tests: trained tokenizer, random weights, 1,024 positions."""

from __future__ import annotations

from typing import Any

import torch

from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer

CORPUS = [f"def f{i}(x):\n    return x + {i}\n" for i in range(200)]
LONG_PREFIX = "".join(CORPUS[:30])  # ~390 tokens


def tiny_lm(architecture: str = "llama") -> tuple[Any, Any]:
    tokenizer = train_tokenizer(CORPUS, 300)
    torch.manual_seed(0)
    config = AgentModelConfig(
        architecture=architecture,  # type: ignore[arg-type]
        hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128, vocab_size=300,
        max_positions=1024, experts=4, experts_per_token=2, expert_intermediate_size=32,
    )  # fmt: skip
    return build_model(config, tokenizer).eval(), tokenizer


def ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
