"""The embedder's tokenizer: BPE trained with `tokenizers` on code and docstrings.

Normalisation splits identifiers before BPE sees them (``getHTTPResponse`` → ``get http
response``, ``user_name`` → ``user name``) and lower-cases, so a query's words and a function's
identifiers meet on the same tokens; whitespace is dropped (indentation says little about what a
function does, and dropping it fits more code into the token budget). Byte-level, so no text is
unknown. Everything is in ``tokenizer.json``: any `transformers` loader reproduces it.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

from policies.agent_lm import PAD

CLS, UNK = "<|cls|>", "<|unk|>"
_CAMEL = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"  # as codeindex.terms


def train_code_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A BPE tokenizer of ``vocab_size`` tokens (special ones included) trained on ``corpus``;
    pads with ``<|pad|>`` on the right (the encoder masks padding)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.Replace(Regex(_CAMEL), " "),
            normalizers.Replace("_", " "),
            normalizers.Lowercase(),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
            # words, numbers and each punctuation character apart
            pre_tokenizers.Split(Regex(r"[a-z]+|[0-9]+|[^\sa-z0-9]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, CLS, UNK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # untyped in transformers
        tokenizer_object=tokenizer, pad_token=PAD, cls_token=CLS, unk_token=UNK
    )
    fast.padding_side = "right"
    return fast
