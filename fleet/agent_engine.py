"""The agent model's inference engine: continuous batching of requests over one KV cache.

Each request (a :class:`Job`: the loaded version it was routed to, its prompt token ids, its
``policies.agent_sampling.SamplingParams``) is queued; one engine thread runs the batch
(:class:`fleet.running_batch.RunningBatch`): between two decoding steps, queued requests join
it (each prompt prefilled alone, its ``n`` rows left-padded into the batch's cache) and rows
leave it when they finish, at their own ``max_new_tokens`` (the API's ``max_tokens``), stop
string or end of sequence, or when their client has gone. So a burst of multi-turn sessions
shares the decoding steps, a request never waits for a batch to end, and rows of different
lengths, temperatures and top-p decode together (each row samples from its own distribution).
A batch holds up to ``max_batch_rows`` rows of one model; a request for another model (a new
version swapped in) waits until the rows decoding the old one have left. Text streams to each
request as it decodes (:mod:`fleet.engine_jobs`). A full queue refuses a request
(:class:`Overloaded`: the API's 429 with Retry-After) instead of queueing without bound. A
failed prefill fails its request, a failed step the batch's requests; the engine goes on.

**The prefix cache** (:mod:`fleet.prefix_cache`) serves the joining rows: a prompt of its
``min_tokens`` or more prefills only what follows the longest cached prefix, and a leaving
row's KV (its prompt and completion) is kept, so a session's next turn (the previous prompt,
the completion, an observation) prefills only the observation.

**Speculative edits** (``speculative``: greedy, one choice) run alone, between two steps:
`transformers`' prompt-lookup decoding proposes the continuation of the n-gram just generated
from where it occurs in the prompt (an edit request carries the original code, so the draft
is mostly right) and the model verifies the whole draft in one forward pass; the tokens are
those of plain greedy decoding. (Assisted generation takes one sequence at a time.)

``continuous=False`` is the engine before continuous batching, kept as the baseline of
``bench/serving.py``: requests queued within ``batch_wait_s`` run one ``generate`` per group
of the same model, temperature and top-p, to the end of its longest row, and every prompt of
the prefix cache's ``min_tokens`` or more runs alone.

Log-probabilities are those of the distribution each token was drawn from (the logits over the
temperature, top-p filtered; greedy: the plain softmax), as ``policies.agent_sampling``
reports for rollouts, so a served completion can be trained on like a trial.

Why our own loop and not `transformers`' continuous batching (``init_continuous_batching``,
5.17): it runs on CPU and its greedy tokens and log-probs equal ``generate``'s, and it was no
faster here (16 prompts of 120-340 tokens x 48 greedy tokens, the default agent LM, one CPU
thread: 0.9-1.4 s vs 1.2 s for this loop; ``generate`` per prompt, the old path, 2.1-2.7 s).
But it switches the model's attention to its paged kernels while it runs (the speculative path
and ``generate`` share the model), takes greedy-or-sampled per manager (one manager, and
thread, per model version and mode), needs ``psutil`` to size its cache on CPU, and ends a row
at a stop string only by an asynchronous cancel. The loop here is ~150 lines over the HF model
and a ``DynamicCache``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from fleet.engine_jobs import (
    Choice,
    FinishReason,
    Job,
    OnText,
    Overloaded,
    advance,
    fail,
    finish,
    finish_cancelled,
)
from fleet.errors import ServingError
from fleet.prefix_cache import PrefixCache
from fleet.running_batch import RunningBatch
from policies.agent_sampling import token_logprobs

__all__ = ["Choice", "Engine", "EngineStats", "FinishReason", "Job", "OnText", "Overloaded"]

log = logging.getLogger(__name__)


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
        continuous: bool = True,
    ) -> None:
        if max_batch_rows < 1 or max_queue < 1 or lookup_tokens < 1:
            raise ValueError("max_batch_rows, max_queue and lookup_tokens must be positive")
        self.max_batch_rows = max_batch_rows
        self.batch_wait_s = batch_wait_s
        self.prefix_cache = prefix_cache
        self.lookup_tokens = lookup_tokens
        self.continuous = continuous
        self.stats = EngineStats()
        self._batch: RunningBatch | None = None  # continuous: the rows decoding now
        self._rows: list[tuple[Job, Choice]] = []  # aligned with the batch's rows
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
        pending += [job for job, _ in self._rows]  # a thread that did not end in time
        while not self._queue.empty():
            pending.append(self._queue.get_nowait())
        for job in pending:
            fail(job, ServingError("the replica is shutting down"))

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.continuous:
                self._admit()
                self._retire()
                self._decode()
            else:
                jobs = self._take()
                if jobs:
                    self.run(jobs)
        if self._rows:  # stopped while decoding
            self._fail_rows(ServingError("the replica is shutting down"))

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

    # Continuous batching --------------------------------------------------------------------

    def _admit(self) -> None:
        """Join queued jobs to the running batch until one cannot join yet (it waits, as
        ``_carry``, for rows to leave); waits for the queue only while nothing decodes."""
        while True:
            job, self._carry = self._carry, None
            if job is None:
                try:
                    job = (
                        self._queue.get(timeout=0.1) if not self._rows else self._queue.get_nowait()
                    )
                except queue.Empty:
                    return
            if not self._join(job):
                self._carry = job
                return

    def _join(self, job: Job) -> bool:
        """Prefill ``job`` and add its choices to the batch; False when it must wait (the
        batch is full, or runs another model: a version being swapped in)."""
        if job.cancelled.is_set():
            finish_cancelled(job)
            return True
        if job.speculative:  # assisted generation takes one sequence at a time
            self._generate([job], solo=True)
            return True
        batch = self._batch
        if (
            batch is not None
            and batch.rows
            and (batch.model is not job.model or batch.rows + job.sampling.n > self.max_batch_rows)
        ):
            return False
        if batch is None or batch.model is not job.model:
            batch = self._batch = RunningBatch(job.model)
        s = job.sampling
        try:
            prefix = (0, None)
            if (
                self.prefix_cache is not None
                and len(job.prompt_ids) >= self.prefix_cache.min_tokens
            ):
                prefix = self.prefix_cache.lookup(job.model, job.prompt_ids)
            job.cached_tokens = prefix[0]
            tokens, logprobs = batch.join(job.prompt_ids, s.n, s.temperature, s.top_p, prefix)
        except Exception as exc:  # its prefill failed: this request fails, the batch goes on
            log.exception("prefill failed")
            fail(job, ServingError(f"generation failed: {type(exc).__name__}: {exc}"))
            return True
        for choice, token, logprob in zip(job.choices, tokens, logprobs, strict=True):
            self._rows.append((job, choice))
            self._take_token(job, choice, token, logprob)
        return True

    def _decode(self) -> None:
        """One token for every running row; a failure fails the batch's requests."""
        if self._batch is None or not self._rows:
            return
        started = time.monotonic()
        try:
            tokens, logprobs = self._batch.step()
        except Exception as exc:
            log.exception("decoding failed for %d rows", len(self._rows))
            self._fail_rows(ServingError(f"generation failed: {type(exc).__name__}: {exc}"))
            return
        self.stats.batches += 1
        self.stats.sequences += len(self._rows)
        self.stats.generate_s += time.monotonic() - started
        for (job, choice), token, logprob in zip(self._rows, tokens, logprobs, strict=True):
            self._take_token(job, choice, token, logprob)

    def _take_token(self, job: Job, choice: Choice, token: int, logprob: float) -> None:
        if advance(job.tokenizer, job, choice, token):
            choice.logprobs.append(logprob)
            self.stats.generated_tokens += 1

    def _retire(self) -> None:
        """Rows whose choice finished (or whose client went) leave the batch; the prefix cache
        keeps the KV of each request's first choice; a job whose choices all finished resolves."""
        if self._batch is None:
            return
        keep, batch = [], self._batch
        for row, (job, choice) in enumerate(self._rows):
            if choice.finish_reason is None and job.cancelled.is_set():
                finish(job, choice, "cancelled")
            if choice.finish_reason is None:
                keep.append(row)
                continue
            if self.prefix_cache is not None and choice.index == 0:
                held, kv = batch.row_cache(row)
                self.prefix_cache.store(job.model, [*job.prompt_ids, *choice.token_ids][:held], kv)
            if all(c.finish_reason is not None for c in job.choices) and not job.future.done():
                job.future.set_result(job.choices)
        if len(keep) < len(self._rows):
            self._rows = [self._rows[row] for row in keep]
            batch.keep(keep)

    def _fail_rows(self, exc: Exception) -> None:
        for job, _ in self._rows:
            fail(job, exc)
        self._rows, self._batch = [], None

    # One generate per batch (continuous=False, and speculative requests) -----------------

    def run(self, jobs: Sequence[Job]) -> None:
        """Generate for ``jobs`` now, on the calling thread (the engine thread, or a caller
        that drives the engine itself: tests, benchmarks); each job's future resolves."""
        if self.continuous:
            pending = list(jobs)
            while pending or self._rows:
                pending = [job for job in pending if not self._join(job)]
                self._retire()
                self._decode()
            return
        groups: dict[tuple[int, bool, float, float], list[Job]] = {}
        for job in jobs:
            if job.cancelled.is_set():
                finish_cancelled(job)
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
                fail(job, ServingError(f"generation failed: {type(exc).__name__}: {exc}"))
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
    """generate's streamer: hands each row's new tokens to :func:`fleet.engine_jobs.advance`."""

    def __init__(self, tokenizer: Any, rows: list[tuple[Job, Choice]]) -> None:
        self._tokenizer = tokenizer
        self._rows = rows
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate's first call passes the prompt
            self._prompt_seen = True
            return
        tokens = value.tolist()
        if value.dim() == 1:  # sampling: one token per row
            for (job, choice), token in zip(self._rows, tokens, strict=True):
                advance(self._tokenizer, job, choice, token)
        else:  # assisted decoding: (rows, accepted tokens)
            for (job, choice), row in zip(self._rows, tokens, strict=True):
                for token in row:
                    advance(self._tokenizer, job, choice, token)

    def end(self) -> None:
        for job, choice in self._rows:
            if choice.finish_reason is None:
                finish(job, choice, "cancelled" if job.cancelled.is_set() else "length")


class _RowsDone(StoppingCriteria):
    """generate's per-row stop: a row is done once its choice has finished."""

    def __init__(self, rows: list[tuple[Job, Choice]]) -> None:
        self._rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        done = [c.finish_reason is not None or j.cancelled.is_set() for j, c in self._rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
