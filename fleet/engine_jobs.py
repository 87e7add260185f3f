"""A request to the agent engine (:class:`Job`), the choices it generates (:class:`Choice`)
and how a choice's text grows token by token, whichever engine path decodes it
(:mod:`fleet.agent_engine`): stop strings, end of sequence and ``max_new_tokens`` end a choice;
text is streamed as soon as it cannot still turn into a stop string nor is half a UTF-8
character.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.errors import ServingError
from policies.agent_sampling import SamplingParams

FinishReason = Literal["stop", "length", "cancelled"]
OnText = Callable[[int, str], None]  # (choice index, new text), called on the engine thread


class Overloaded(ServingError):
    """The engine's queue is full: retry after ``retry_after_s``."""

    def __init__(self, queued: int, retry_after_s: int) -> None:
        super().__init__(
            f"{queued} requests are queued, the most this replica takes; retry after "
            f"{retry_after_s} s"
        )
        self.retry_after_s = retry_after_s


@dataclass
class Choice:
    """One generated sequence of a request. ``token_ids`` end with the end-of-sequence token
    when the model chose to stop (kept, with its log-prob: the learner trains that decision);
    ``text`` excludes it and anything from a stop string on."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: FinishReason | None = None
    streamed: int = 0  # characters of text handed to on_text


class Job:
    """One request: ``model`` and ``tokenizer`` of the version it was routed to. ``on_text``
    receives each choice's text as it grows; ``future`` resolves to the choices."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        speculative: bool = False,
        on_text: OnText | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.prompt_ids = tuple(prompt_ids)
        self.sampling = sampling
        self.speculative = speculative and sampling.greedy and sampling.n == 1
        self.on_text = on_text
        self.choices = [Choice(i) for i in range(sampling.n)]
        self.future: Future[list[Choice]] = Future()
        self.cancelled = threading.Event()  # the client went away: stop generating for it
        self.cached_tokens = 0  # prompt tokens whose KV came from the prefix cache
        self.submitted_at = time.monotonic()
        self.first_token_at: float | None = None

    def cancel(self) -> None:
        self.cancelled.set()


def advance(tokenizer: Any, job: Job, choice: Choice, token: int) -> bool:
    """Append ``token`` to ``choice`` (False, and the choice finished, when its client has
    gone): stop strings, end of sequence and ``max_new_tokens`` end it; text goes to
    ``on_text`` as soon as it cannot still turn into a stop string (nor is half a UTF-8
    character)."""
    if choice.finish_reason is not None:
        return False
    if job.cancelled.is_set():
        finish(job, choice, "cancelled")
        return False
    if job.first_token_at is None:
        job.first_token_at = time.monotonic()
    choice.token_ids.append(int(token))
    if token == tokenizer.eos_token_id:
        finish(job, choice, "stop")
        return True
    text = tokenizer.decode(choice.token_ids, skip_special_tokens=True)
    stops = [(text.find(s), s) for s in job.sampling.stop if s and s in text]
    if stops:
        choice.text = text[: min(stops)[0]]
        finish(job, choice, "stop")
        return True
    choice.text = text
    if len(choice.token_ids) >= job.sampling.max_new_tokens:
        finish(job, choice, "length")
        return True
    stream(job, choice, safe_length(text, job.sampling.stop))
    return True


def finish(job: Job, choice: Choice, reason: FinishReason) -> None:
    choice.finish_reason = reason
    stream(job, choice, len(choice.text))


def stream(job: Job, choice: Choice, upto: int) -> None:
    if upto > choice.streamed and job.on_text is not None:
        job.on_text(choice.index, choice.text[choice.streamed : upto])
    choice.streamed = max(choice.streamed, upto)


def safe_length(text: str, stops: Sequence[str]) -> int:
    """How much of ``text`` can be streamed: not a trailing half character, nor a tail that a
    stop string may still complete."""
    end = len(text.rstrip("\ufffd"))
    for stop in stops:
        for k in range(min(len(stop) - 1, end), 0, -1):
            if text[:end].endswith(stop[:k]):
                end -= k
                break
    return max(end, 0)


def finish_cancelled(job: Job) -> None:
    for choice in job.choices:
        choice.finish_reason = "cancelled"
    job.future.set_result(job.choices)


def fail(job: Job, exc: Exception) -> None:
    if not job.future.done():
        job.future.set_exception(exc)
