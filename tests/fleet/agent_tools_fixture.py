"""A tiny agent LM with our chat template, and a way to script what it writes.

The model is real (random weights, `transformers`), served by the real engine. A random model
never writes a tool call, so a test scripts one: :func:`script` puts a `transformers`
``sequence_bias`` in the model's generation config that, after the token ids of ``context``,
lifts each next token of ``continuation`` (then the end of sequence) by ``bias`` logits. Greedy
decoding then writes exactly that continuation, and its log-probs are the biased
distribution's (small, not 0, with the default bias).
"""

from __future__ import annotations

from typing import Any

import torch

from fleet.rollout_worker import AgentPolicy
from fleet.subscriber import Routed, ServedModel, ServingSnapshot
from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer
from schemas.enums import Channel
from tests.fleet.agent_lm_fixture import CORPUS, ids

MODEL = "agent-lm"
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "submit", "description": "Finish.",
     "parameters": {"type": "object", "properties": {}}}},
]  # fmt: skip


def tiny_chat_lm() -> AgentPolicy:
    tokenizer = train_tokenizer(CORPUS, 300, chat=True)
    torch.manual_seed(0)
    config = AgentModelConfig(
        architecture="llama", hidden_size=64, layers=2, heads=4, kv_heads=2,
        intermediate_size=128, vocab_size=300, max_positions=1024,
    )  # fmt: skip
    return AgentPolicy(build_model(config, tokenizer).eval(), tokenizer)


def script(
    policy: AgentPolicy, context: str | list[int], continuation: str, bias: float = 12.0
) -> list[int]:
    """After ``context`` (text, or its ids as they end the prompt) the model writes
    ``continuation`` and its end of sequence; returns the ids it will write."""
    tokenizer = policy.tokenizer
    before = ids(tokenizer, context) if isinstance(context, str) else list(context)
    out = [*ids(tokenizer, continuation), tokenizer.eos_token_id]
    config = policy.model.generation_config
    biases = dict(config.sequence_bias or {})
    for k in range(len(out)):
        biases[tuple(before + out[: k + 1])] = bias
    config.sequence_bias = biases
    return out


def unscript(policy: AgentPolicy) -> None:
    policy.model.generation_config.sequence_bias = None


class Replica:
    """What the app reads from a ModelSubscriber: ``policy`` as version 2 in production."""

    model_name = MODEL
    replica_id = "replica-t"
    rejected = 0
    serving_version = 2

    def __init__(self, policy: AgentPolicy) -> None:
        self.policy = policy
        self.snapshot: ServingSnapshot[Any] = ServingSnapshot(
            ServedModel(Channel.PRODUCTION, 2, policy, "a" * 64, 1.0), None
        )

    def route(self, user_id: str) -> Routed[Any]:
        return Routed(Channel.PRODUCTION, 2, self.policy)
