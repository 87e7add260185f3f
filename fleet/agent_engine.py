"""The agent model's inference engine: requests batched into `transformers`' ``generate``.

Each request (a :class:`Job`: the loaded version it was routed to, its prompt token ids, its
``policies.agent_sampling.SamplingParams``) is queued; one engine thread takes what is queued
within ``batch_wait_s``, up to ``max_batch_rows`` sequences (a request asks for ``n``), and runs
one ``generate`` per group of requests that can share it (same model, same temperature and
top-p): left-padded prompts, the KV cache, a streamer that hands every new token to its request
as text as soon as it decodes, and a stopping criterion that ends each row at its own
``max_new_tokens`` (the API's ``max_tokens``), stop string or end of sequence, or when its
client has gone. A full queue refuses a request
(:class:`Overloaded`: the API's 429 with Retry-After) instead of queueing without bound.

Two kinds of request run alone, on purpose:

* **Speculative edits** (``speculative``: greedy, one choice): `transformers`' prompt-lookup
  decoding proposes the continuation of the n-gram just generated from where it occurs in the
  prompt (an edit request carries the original code, so the draft is mostly right) and the
  model verifies the whole draft in one forward pass; the tokens are those of plain greedy
  decoding. (Assisted generation takes one sequence at a time.)
* **Long prompts** (from the prefix cache's ``min_tokens``): the longest prefix a previous
  request's KV cache covers is reused (:mod:`fleet.prefix_cache`) and only the rest is
  prefilled; the prompt's KV cache is kept for the next request.

Log-probabilities are those of the distribution each token was drawn from
(``policies.agent_sampling.token_logprobs``), as for rollouts, so a served completion can be
trained on like a trial.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from fleet.errors import ServingError
from fleet.prefix_cache import PrefixCache
from policies.agent_sampling import SamplingParams, token_logprobs

log = logging.getLogger(__name__)
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


@dataclass
class EngineStats:
    batches: int = 0
    sequences: int = 0
    generated_tokens: int = 0
    generate_s: float = 0.0
    speculative: int = 0
    refused: int = 0


class Engine:
    """Batches :class:`Job` s into ``generate`` on one thread (see the module docstring)."""

    def __init__(
        self,
        *,
        max_batch_rows: int = 16,
        max_queue: int = 64,
        batch_wait_s: float = 0.004,
        prefix_cache: PrefixCache | None = None,
        lookup_tokens: int = 10,
    ) -> None:
        if max_batch_rows < 1 or max_queue < 1 or lookup_tokens < 1:
            raise ValueError("max_batch_rows, max_queue and lookup_tokens must be positive")
        self.max_batch_rows = max_batch_rows
        self.batch_wait_s = batch_wait_s
        self.prefix_cache = prefix_cache
        self.lookup_tokens = lookup_tokens
        self.stats = EngineStats()
        self._queue: queue.Queue[Job] = queue.Queue(maxsize=max_queue)
        self._carry: Job | None = None  # taken from the queue, left for the next batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # The queue -----------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``; Overloaded when the queue is full."""
        if self._stop.is_set():
            raise ServingError("the engine is stopped")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.stats.refused += 1
            raise Overloaded(self._queue.qsize(), retry_after_s=1) from None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="agent-engine", daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking jobs; queued ones fail with ServingError."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        pending = [self._carry] if self._carry else []
        while not self._queue.empty():
            pending.append(self._queue.get_nowait())
        for job in pending:
            _fail(job, ServingError("the replica is shutting down"))

    def _loop(self) -> None:
        while not self._stop.is_set():
            jobs = self._take()
            if jobs:
                self.run(jobs)

    def _take(self) -> list[Job]:
        first = self._carry
        self._carry = None
        if first is None:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                return []
        jobs, rows = [first], first.sampling.n
        deadline = time.monotonic() + self.batch_wait_s
        while rows < self.max_batch_rows:
            try:
                job = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                break
            if rows + job.sampling.n > self.max_batch_rows:
                self._carry = job
                break
            jobs.append(job)
            rows += job.sampling.n
        return jobs

    # Generation ----------------------------------------------------------------------------

    def run(self, jobs: Sequence[Job]) -> None:
        """Generate for ``jobs`` now, on the calling thread (the engine thread, or a caller
        that drives the engine itself: tests, benchmarks); each job's future resolves."""
        groups: dict[tuple[int, bool, float, float], list[Job]] = {}
        for job in jobs:
            if job.cancelled.is_set():
                _finish_cancelled(job)
            elif job.speculative or self._long(job):
                self._generate([job], solo=True)
            else:
                s = job.sampling
                groups.setdefault((id(job.model), s.greedy, s.temperature, s.top_p), []).append(job)
        for group in groups.values():
            self._generate(group, solo=False)

    def _long(self, job: Job) -> bool:
        cache = self.prefix_cache
        return cache is not None and job.sampling.n == 1 and len(job.prompt_ids) >= cache.min_tokens

    def _generate(self, jobs: list[Job], *, solo: bool) -> None:
        started = time.monotonic()
        try:
            rows = self._generate_rows(jobs, solo)
        except Exception as exc:  # one failed batch fails its requests, never the engine
            log.exception("generation failed for %d requests", len(jobs))
            for job in jobs:
                _fail(job, ServingError(f"generation failed: {type(exc).__name__}: {exc}"))
            return
        self.stats.batches += 1
        self.stats.sequences += rows
        self.stats.generate_s += time.monotonic() - started
        for job in jobs:
            self.stats.generated_tokens += sum(len(c.token_ids) for c in job.choices)
            if not job.future.done():
                job.future.set_result(job.choices)

    def _generate_rows(self, jobs: list[Job], solo: bool) -> int:
        lead = jobs[0]
        model, tokenizer, sampling = lead.model, lead.tokenizer, lead.sampling
        device = next(model.parameters()).device
        rows = [(job, choice) for job in jobs for choice in job.choices]
        prompts = [list(job.prompt_ids) for job, _ in rows]
        width = max(len(p) for p in prompts)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        attention = torch.tensor(
            [[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device
        )
        streamer = _RowStreamer(tokenizer, rows)
        kwargs: dict[str, Any] = {}
        cache = self.prefix_cache if solo and not lead.speculative else None
        if cache is not None:
            lead.cached_tokens, kwargs["past_key_values"] = cache.lookup(model, lead.prompt_ids)
            if kwargs["past_key_values"] is None:
                del kwargs["past_key_values"]
        if lead.speculative:
            kwargs["prompt_lookup_num_tokens"] = self.lookup_tokens
            self.stats.speculative += 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                do_sample=not sampling.greedy,
                temperature=None if sampling.greedy else sampling.temperature,
                top_p=None if sampling.greedy else sampling.top_p,
                top_k=None,  # transformers' default top_k=50 would change the distribution
                max_new_tokens=max(job.sampling.max_new_tokens for job in jobs),
                pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id,
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([_RowsDone(rows)]),
                return_dict_in_generate=True,
                output_scores=True,
                **kwargs,
            )
        streamer.end()
        generated = out.sequences[:, width:]
        if out.scores:
            logprobs = token_logprobs(out.scores, generated[:, : len(out.scores)]).tolist()
            for row, (_, choice) in enumerate(rows):
                choice.logprobs = logprobs[row][: len(choice.token_ids)]
        if cache is not None and getattr(out, "past_key_values", None) is not None:
            cache.store(model, lead.prompt_ids, out.past_key_values)
        return len(rows)


class _RowStreamer(BaseStreamer):
    """Hands each row's new tokens to its choice: stop strings, end of sequence and
    ``max_new_tokens`` end a row; text goes to ``on_text`` as soon as it cannot still turn into a
    stop string (nor is half a UTF-8 character)."""

    def __init__(self, tokenizer: Any, rows: list[tuple[Job, Choice]]) -> None:
        self._tokenizer = tokenizer
        self._eos = tokenizer.eos_token_id
        self._rows = rows
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate's first call passes the prompt
            self._prompt_seen = True
            return
        tokens = value.tolist()
        if value.dim() == 1:  # sampling: one token per row
            for (job, choice), token in zip(self._rows, tokens, strict=True):
                self._advance(job, choice, token)
        else:  # assisted decoding: (rows, accepted tokens)
            for (job, choice), row in zip(self._rows, tokens, strict=True):
                for token in row:
                    self._advance(job, choice, token)

    def end(self) -> None:
        for job, choice in self._rows:
            if choice.finish_reason is None:
                self._finish(job, choice, "cancelled" if job.cancelled.is_set() else "length")

    def _advance(self, job: Job, choice: Choice, token: int) -> None:
        if choice.finish_reason is not None:
            return
        if job.cancelled.is_set():
            self._finish(job, choice, "cancelled")
            return
        if job.first_token_at is None:
            job.first_token_at = time.monotonic()
        choice.token_ids.append(int(token))
        if token == self._eos:
            self._finish(job, choice, "stop")
            return
        text = self._tokenizer.decode(choice.token_ids, skip_special_tokens=True)
        stops = [(text.find(s), s) for s in job.sampling.stop if s and s in text]
        if stops:
            choice.text = text[: min(stops)[0]]
            self._finish(job, choice, "stop")
            return
        choice.text = text
        if len(choice.token_ids) >= job.sampling.max_new_tokens:
            self._finish(job, choice, "length")
            return
        self._stream(job, choice, _safe_length(text, job.sampling.stop))

    def _finish(self, job: Job, choice: Choice, reason: FinishReason) -> None:
        choice.finish_reason = reason
        self._stream(job, choice, len(choice.text))

    @staticmethod
    def _stream(job: Job, choice: Choice, upto: int) -> None:
        if upto > choice.streamed and job.on_text is not None:
            job.on_text(choice.index, choice.text[choice.streamed : upto])
        choice.streamed = max(choice.streamed, upto)


class _RowsDone(StoppingCriteria):
    """generate's per-row stop: a row is done once its choice has finished."""

    def __init__(self, rows: list[tuple[Job, Choice]]) -> None:
        self._rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        done = [c.finish_reason is not None or j.cancelled.is_set() for j, c in self._rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _safe_length(text: str, stops: Sequence[str]) -> int:
    """How much of ``text`` can be streamed: not a trailing half character, nor a tail that a
    stop string may still complete."""
    end = len(text.rstrip("\ufffd"))
    for stop in stops:
        for k in range(min(len(stop) - 1, end), 0, -1):
            if text[:end].endswith(stop[:k]):
                end -= k
                break
    return max(end, 0)


def _finish_cancelled(job: Job) -> None:
    for choice in job.choices:
        choice.finish_reason = "cancelled"
    job.future.set_result(job.choices)


def _fail(job: Job, exc: Exception) -> None:
    if not job.future.done():
        job.future.set_exception(exc)
