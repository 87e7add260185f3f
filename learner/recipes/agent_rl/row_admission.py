"""Which rewarded completions a token window admits, and the dead letters of those it refuses.

The learner never stops on data: every row of a Reward file ends in exactly one of

* **trained** — when its prompt and completion do not fit ``seq_len`` together, the prompt
  loses its start (``cut_rows``; the completion is never cut: its tokens are what is trained);
* **overlong** — the completion alone does not fit a row (serving allows prompt + max_tokens up
  to the model's context, rollouts up to 4,096 new tokens): left out, counted;
* **greedy** — served at temperature 0 (greedy decoding, speculative edits): not a sample of any
  distribution the learner can compare with (`learner.recipes.agent_rl.grpo`), left out, counted;
* **dead letter** — malformed (a ``cause`` below): left out, counted, and recorded with its
  cause and its Kafka coordinates in the window's ``dead_letters.jsonl``.

Dead-letter causes: ``missing_tokens`` (no prompt ids, log-probs or completion ids),
``length_mismatch`` (completion ids vs behaviour log-probs, or vs a non-empty completion mask),
``invalid_mask`` (a completion mask value other than 0 or 1), ``token_out_of_vocab`` (an id
outside [0, vocab)), ``invalid_logprob`` (NaN, infinite or above 0), ``invalid_sampling``
(temperature or top_p missing or out of range: the behaviour distribution cannot be
reproduced), ``invalid_reward`` (reward, or a trial's advantage, missing or not finite; a
trial without its group).

Why a file and not the ``dlq.<stage>`` topic of `contracts.dead_letters`: the learner
reads the lake, not Kafka, so it has no original bytes to put in the envelope's value (the
record is still in the lake and the topic, at the coordinates each entry names), and a file
written inside the window directory before its atomic rename appears exactly once with the
window, whatever crash comes between; a produce to a broker would be lost or doubled by a crash
after the rename, and a broker outage would hold the windows back again. Each entry carries the
envelope's header fields (``error``, ``cause``, ``stage``, ``topic``, ``partition``,
``offset``) plus the row's ``id`` and its Reward's coordinates; never token ids or text (a
served completion may hold a user's code).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEAD_LETTERS_NAME = "dead_letters.jsonl"  # in a window's directory, beside window.json
DEAD_LETTER_STAGE = "learner"
MAX_LOGPROB = 1e-3  # a log-probability is <= 0; this much above is float rounding
INT32_LIMIT = 2**31  # windows store ids as int32: without a vocabulary, the bound of the type


@dataclass
class Admission:
    """The verdict on a window's rows: indices of the rows to train (``keep``, in order), how
    many stay out and why. (Which kept rows lose the start of their prompt, the window counts
    when it packs them.)"""

    keep: list[int] = field(default_factory=list)
    overlong: int = 0
    greedy: int = 0
    dead_letters: list[dict[str, Any]] = field(default_factory=list)

    @property
    def causes(self) -> dict[str, int]:
        """Dead-lettered rows by cause."""
        return dict(Counter(str(d["cause"]) for d in self.dead_letters))


def admit_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    seq_len: int,
    vocab_size: int | None,
    trial_source: str,
    token_topics: Mapping[str, str],
    reward_topic: str,
) -> Admission:
    """Judge ``rows``: a Reward's columns (``source``, ``source_id``, ``reward``, ``advantage``,
    ``group_id``, ``_partition``, ``_offset``) joined with its tokens' (``prompt_token_ids``,
    ``completion_token_ids``, ``behaviour_logprobs``, ``temperature``, ``top_p``,
    ``token_partition``, ``token_offset``; ``completion_mask`` when present). Rows of
    ``trial_source`` need the joiner's advantage and group; others get theirs in the window.
    ``token_topics``: Reward source → topic of its tokens (for the dead letters). ``vocab_size``
    None: ids only need to fit int32. Never raises on a row's content."""
    admission = Admission()
    for index, row in enumerate(rows):
        refused = refusal(row, vocab_size=vocab_size, trial=row.get("source") == trial_source)
        if refused is not None:
            cause, error, in_reward = refused
            admission.dead_letters.append(
                _dead_letter(row, cause, error, in_reward, token_topics, reward_topic)
            )
        elif float(row["temperature"]) == 0.0:
            admission.greedy += 1
        elif len(row["completion_token_ids"]) >= seq_len:
            admission.overlong += 1
        else:
            admission.keep.append(index)
    return admission


def refusal(
    row: Mapping[str, Any], *, vocab_size: int | None, trial: bool
) -> tuple[str, str, bool] | None:
    """(cause, what was wrong, whether the Reward record is at fault rather than the token
    record) for a malformed row, or None for a well-formed one."""
    for name in ("reward", *(("advantage",) if trial else ())):
        if not _finite(row.get(name)):
            return "invalid_reward", f"the Reward's {name} is {row.get(name)!r}, not a number", True
    if trial and not row.get("group_id"):
        return "invalid_reward", "the trial's Reward has no group_id", True
    prompt: Sequence[Any] = row.get("prompt_token_ids") or []  # null reads as empty
    completion: Sequence[Any] = row.get("completion_token_ids") or []
    logprobs: Sequence[Any] = row.get("behaviour_logprobs") or []
    missing = [n for n, v in (("prompt_token_ids", prompt), ("completion_token_ids", completion),
                              ("behaviour_logprobs", logprobs)) if not v]  # fmt: skip
    if missing:
        return "missing_tokens", f"no {', '.join(missing)}", False
    if len(logprobs) != len(completion):
        return (
            "length_mismatch",
            f"{len(completion)} completion token ids but {len(logprobs)} behaviour log-probs",
            False,
        )
    mask: Sequence[Any] = row.get("completion_mask") or []  # null or empty: all generated
    if mask and len(mask) != len(completion):
        return (
            "length_mismatch",
            f"{len(completion)} completion token ids but a completion mask of {len(mask)}",
            False,
        )
    if any(m not in (0, 1) or isinstance(m, bool) for m in mask):
        return "invalid_mask", "a completion mask value is not 0 or 1", False
    limit = INT32_LIMIT if vocab_size is None else vocab_size
    for token in (*prompt, *completion):
        if not isinstance(token, int) or not 0 <= token < limit:
            return "token_out_of_vocab", f"token id {token} is outside [0, {limit})", False
    for logprob in logprobs:
        if not _finite(logprob) or logprob > MAX_LOGPROB:
            return (
                "invalid_logprob",
                f"behaviour log-prob {logprob} is not a log-probability",
                False,
            )
    return _sampling_refusal(row.get("temperature"), row.get("top_p"))


def _sampling_refusal(temperature: Any, top_p: Any) -> tuple[str, str, bool] | None:
    """A refusal when the sampling distribution cannot be reproduced (unknown or impossible
    parameters); a producer fixes it by recording the sampler's temperature and top_p."""
    for name, value, ok in (("temperature", temperature, _finite(temperature) and temperature >= 0),
                            ("top_p", top_p, _finite(top_p) and 0 < top_p <= 1)):  # fmt: skip
        if value is None:
            return "invalid_sampling", f"{name} is unknown (null): record the sampler's", False
        if not ok:
            return "invalid_sampling", f"{name} {value!r} is out of range", False
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _dead_letter(
    row: Mapping[str, Any],
    cause: str,
    error: str,
    in_reward: bool,
    token_topics: Mapping[str, str],
    reward_topic: str,
) -> dict[str, Any]:
    """One dead letter: the envelope's header fields, pointing at the faulty record."""
    if in_reward:
        topic, partition, offset = reward_topic, row.get("_partition"), row.get("_offset")
    else:
        topic = token_topics.get(str(row.get("source")), "")
        partition, offset = row.get("token_partition"), row.get("token_offset")
    return {
        "error": error, "cause": cause, "stage": DEAD_LETTER_STAGE, "topic": topic,
        "partition": partition, "offset": offset, "id": row.get("source_id"),
        "reward_topic": reward_topic, "reward_partition": row.get("_partition"),
        "reward_offset": row.get("_offset"),
    }  # fmt: skip


def dead_letters_jsonl(entries: Sequence[Mapping[str, Any]]) -> str:
    """The text of a window's ``dead_letters.jsonl``: one JSON object a line."""
    return "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
