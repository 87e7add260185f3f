"""The tokens of served tool-call turns, so a session's later requests see them as generated.

An OpenAI client sends the whole conversation each turn; the model's earlier turns come back as
text (content and ``tool_calls``). Re-tokenized, that text is not always the ids the model wrote
(a BPE may merge differently; the model may have spaced its JSON otherwise), and nothing in it
says which tokens were sampled. :class:`ServedTurns` keeps, per tool call id this replica
issued, the turn's token ids and behaviour log-probs, with the model, version and sampling that
made them. :func:`chat_prompt` builds a chat request's prompt ids piece by piece
(``policies.agent_chat.segments``, as ``environments.episode_runner`` builds episodes) and puts
a known turn's own ids in place of its text when the same model, version, temperature and top-p
serve the request: those ids are marked 1 in ``mask`` with their log-probs (the
``AgentCompletion``'s ``prompt_mask``/``prompt_logprobs``); everything else is 0.

Memory is bounded in tokens held (LRU by tool call id); a turn evicted, or made by another
version, is re-tokenized and marked 0: the session still trains, from its last turns only.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from environments.episode_runner import tokenize_segments
from ground.sized_lru import SizedLRU
from policies.agent_chat import ToolCall, segments


@dataclass(frozen=True)
class Sampler:
    """What made a turn's tokens: the loaded model (by identity), its version, the sampling."""

    model: Any
    version: int
    temperature: float
    top_p: float

    def same(self, other: Sampler) -> bool:
        same_model = self.model is other.model and self.version == other.version
        return same_model and (self.temperature, self.top_p) == (other.temperature, other.top_p)


@dataclass(frozen=True)
class ServedTurn:
    """One assistant turn that returned a tool call: ``prefill_ids`` (in its prompt, not
    sampled) then ``token_ids`` with ``logprobs`` (sampled), and what the API returned (the
    content and the call, to know the client's copy of the turn)."""

    prefill_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    content: str
    call: ToolCall
    version: int
    temperature: float
    top_p: float
    model: weakref.ref[Any] = field(compare=False)

    @property
    def tokens(self) -> int:
        return len(self.prefill_ids) + len(self.token_ids)

    def made_by(self, sampler: Sampler) -> bool:
        made = Sampler(self.model(), self.version, self.temperature, self.top_p)
        return made.model is not None and made.same(sampler)

    def matches(self, message: Mapping[str, Any]) -> bool:
        """Whether ``message`` (an assistant message of a request) is this turn as returned."""
        calls = message.get("tool_calls") or []
        if len(calls) != 1 or (message.get("content") or "") != self.content:
            return False
        returned = self.call.openai()["function"]
        function = calls[0]["function"]
        return bool(function["name"] == returned["name"] and _same_json(function, returned))


def _same_json(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    try:
        return bool(json.loads(a["arguments"] or "{}") == json.loads(b["arguments"] or "{}"))
    except ValueError:
        return False


class ServedTurns:
    """A thread-safe LRU of :class:`ServedTurn` by tool call id, holding at most
    ``max_tokens`` tokens in all."""

    def __init__(self, max_tokens: int = 262_144) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.max_tokens = max_tokens
        self._turns: SizedLRU[str, ServedTurn] = SizedLRU(max_tokens, lambda turn: turn.tokens)

    @property
    def held_tokens(self) -> int:
        return self._turns.held

    @property
    def evictions(self) -> int:
        return self._turns.evictions

    def __len__(self) -> int:
        return len(self._turns)

    def put(self, call_id: str, turn: ServedTurn) -> None:
        self._turns.put(call_id, turn)

    def get(self, call_id: str) -> ServedTurn | None:
        return self._turns.get(call_id)


@dataclass(frozen=True)
class ChatPrompt:
    """A chat request's prompt: ``ids``, and per id whether this model generated it in an
    earlier turn (``mask``) with its behaviour log-prob (``logprobs``, 0.0 elsewhere)."""

    ids: tuple[int, ...]
    mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    prefill_ids: tuple[int, ...]  # the prompt's last ids: the tool_choice prefill


def chat_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    prefill: str,
    turns: ServedTurns,
    sampler: Sampler,
) -> ChatPrompt:
    """The prompt of ``messages`` in our chat format (``tools`` in the system block), ending
    with the generation prompt and ``prefill``; each assistant turn that ``turns`` knows (by
    its tool call id), made by ``sampler``, as its own ids (module docstring)."""
    assistants = iter([m for m in messages if m["role"] == "assistant"])
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for text, generated in segments(messages, tokenizer.eos_token, tools, True):
        turn = _known_turn(next(assistants), turns, sampler) if generated else None
        if turn is None:
            piece, _ = tokenize_segments(tokenizer, [(text, False)])
            ids.extend(piece)
            mask.extend([0] * len(piece))
            logprobs.extend([0.0] * len(piece))
            continue
        ids.extend(turn.prefill_ids + turn.token_ids)
        mask.extend([0] * len(turn.prefill_ids) + [1] * len(turn.token_ids))
        logprobs.extend([0.0] * len(turn.prefill_ids) + list(turn.logprobs))
    prefill_ids = tuple(tokenize_segments(tokenizer, [(prefill, False)])[0]) if prefill else ()
    ids.extend(prefill_ids)
    mask.extend([0] * len(prefill_ids))
    logprobs.extend([0.0] * len(prefill_ids))
    return ChatPrompt(tuple(ids), tuple(mask), tuple(logprobs), prefill_ids)


def _known_turn(
    message: Mapping[str, Any], turns: ServedTurns, sampler: Sampler
) -> ServedTurn | None:
    for call in message.get("tool_calls") or ():
        turn = turns.get(call["id"])
        if turn is not None and turn.made_by(sampler) and turn.matches(message):
            return turn
    return None
