"""The embedder's network: a small BERT-style encoder built with `transformers` from a config
(never downloaded), whose token states are mean-pooled over the real tokens and L2-normalised.

BERT's bidirectional attention over absolute positions is all a bi-encoder of short chunks
needs; the default (~1.3M parameters, ~3 MB in float16) trains on 2 busy CPU cores in under
ten minutes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import BertConfig, BertModel, PreTrainedModel

from codeindex.embedding.errors import EmbeddingError
from policies.model_build import MODEL_BUILD_LOCK


@dataclass(frozen=True)
class EmbedderConfig:
    """Shape of the encoder (the ``model`` section of the code-embedder recipe's config)."""

    vocab_size: int = 8192  # the tokenizer's; trained to this size
    hidden_size: int = 128  # = the embedding's dimension
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 256
    max_tokens: int = 256  # per text; longer texts are truncated (position table size)
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.hidden_size % self.heads:
            raise EmbeddingError(
                f"hidden_size {self.hidden_size} must divide into {self.heads} heads"
            )
        if self.max_tokens < 8:
            raise EmbeddingError(f"max_tokens {self.max_tokens} is below 8; raise it")

    def hf_config(self, pad_id: int) -> BertConfig:
        """The `transformers` config of this shape."""
        return BertConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_tokens,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
            type_vocab_size=1,
            pad_token_id=pad_id,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_encoder(config: EmbedderConfig, pad_id: int) -> PreTrainedModel:
    """A freshly initialised encoder of ``config`` (seed torch first), without BERT's pooler
    (mean pooling replaces it)."""
    with MODEL_BUILD_LOCK:
        model: PreTrainedModel = BertModel(config.hf_config(pad_id), add_pooling_layer=False)  # type: ignore[no-untyped-call]  # untyped in transformers
    return model


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L2-normalised mean of ``hidden`` [batch, tokens, dim] over the tokens where ``mask``
    [batch, tokens] is 1 → [batch, dim] float32 (pooled in float32 whatever the model's dtype)."""
    weights = mask.unsqueeze(-1).to(torch.float32)
    summed = (hidden.to(torch.float32) * weights).sum(dim=1)
    mean = summed / weights.sum(dim=1).clamp(min=1.0)
    return torch.nn.functional.normalize(mean, dim=-1)
