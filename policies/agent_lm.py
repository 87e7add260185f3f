"""The agent's language model: a causal LM built with `transformers` from a config, never
downloaded, and its tokenizer, trained here (DESIGN §12).

* :class:`AgentModelConfig` picks the architecture: ``llama`` (Llama-family, grouped-query
  attention: ``kv_heads`` < ``heads``; ``kv_heads=1`` is multi-query) by default, or
  ``qwen3_moe`` (a mixture of experts, ``experts`` of which ``experts_per_token`` run per token).
  The default size (~1.3M parameters) trains and generates on 2 CPU cores in minutes.
* :func:`train_tokenizer` trains a byte-level BPE tokenizer with `tokenizers` on a corpus.
* Checkpoints are the standard Hugging Face layout (``config.json``, ``model.safetensors``,
  ``tokenizer.json`` …), so any engine that reads HF checkpoints can serve a version;
  :func:`load_checkpoint` reads such a directory (ours, or any local HF causal-LM checkpoint)
  with ``local_files_only``: nothing is ever fetched from a hub.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from policies.agent_chat import CHAT_TEMPLATE, ROLE_TOKENS
from policies.errors import PolicyError
from policies.model_build import MODEL_BUILD_LOCK

# Never reach a hub, whatever a caller passes (set before transformers is imported).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3MoeConfig,
)

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
Architecture = Literal["llama", "qwen3_moe"]


@dataclass(frozen=True)
class AgentModelConfig:
    """Shape of the agent LM (the ``model`` section of an agent recipe's config)."""

    architecture: Architecture = "llama"
    vocab_size: int = 512  # the tokenizer's; trained to this size
    hidden_size: int = 160
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2  # < heads: grouped-query attention; 1: multi-query; = heads: MHA
    intermediate_size: int = 448  # dense MLP width (llama)
    max_positions: int = 256
    experts: int = 8  # qwen3_moe only
    experts_per_token: int = 2
    expert_intermediate_size: int = 112  # each expert's MLP width; 2 x 112 active = 224
    rope_theta: float = 10_000.0

    def __post_init__(self) -> None:
        if self.architecture not in ("llama", "qwen3_moe"):
            raise PolicyError(
                f"architecture {self.architecture!r} is not one of llama, qwen3_moe; set "
                "model.architecture"
            )
        if self.hidden_size % self.heads or self.heads % self.kv_heads:
            raise PolicyError(
                f"hidden_size {self.hidden_size} must divide into {self.heads} heads, and heads "
                f"into kv_heads {self.kv_heads} groups"
            )
        if self.architecture == "qwen3_moe" and not 1 <= self.experts_per_token <= self.experts:
            raise PolicyError(f"experts_per_token must be in 1..experts ({self.experts})")

    def hf_config(self, pad_id: int, bos_id: int, eos_id: int) -> Any:
        """The `transformers` config of this shape."""
        common: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "max_position_embeddings": self.max_positions,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": True,
            "pad_token_id": pad_id,
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
        }
        if self.architecture == "llama":
            return LlamaConfig(intermediate_size=self.intermediate_size, **common)
        moe: dict[str, Any] = {
            "intermediate_size": self.intermediate_size,
            "num_experts": self.experts,
            "num_experts_per_tok": self.experts_per_token,
            "moe_intermediate_size": self.expert_intermediate_size,
            "decoder_sparse_step": 1,  # every layer is a mixture of experts
            "head_dim": self.hidden_size // self.heads,
        }
        return Qwen3MoeConfig(**moe, **common)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_tokenizer(
    corpus: Iterable[str], vocab_size: int, chat: bool = False
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``corpus`` (every byte is representable, so no
    text is unknown), with pad/bos/eos special tokens. ``chat``: the role markers of
    ``policies.agent_chat`` are special tokens too (one id each, never split, after pad/bos/eos)
    and ``chat_template`` is set, so a saved checkpoint renders OpenAI messages with
    ``apply_chat_template`` exactly as the episodes were built."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    roles = list(ROLE_TOKENS) if chat else []
    extra: dict[str, Any] = {"additional_special_tokens": roles} if chat else {}

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS, *roles],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # untyped in transformers
        tokenizer_object=tokenizer, pad_token=PAD, bos_token=BOS, eos_token=EOS, **extra
    )
    fast.padding_side = "left"  # generation batches prompts of different lengths
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(config: AgentModelConfig, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """A freshly initialised model of ``config`` for ``tokenizer`` (seed torch first)."""
    if len(tokenizer) > config.vocab_size:
        raise PolicyError(
            f"the tokenizer has {len(tokenizer)} tokens, more than model.vocab_size "
            f"{config.vocab_size}; raise vocab_size"
        )
    hf = config.hf_config(tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    with MODEL_BUILD_LOCK:
        model: PreTrainedModel = AutoModelForCausalLM.from_config(hf)  # type: ignore[no-untyped-call]  # untyped in transformers
    return model


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def save_checkpoint(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, directory: Path
) -> None:
    """Write ``model`` and ``tokenizer`` to ``directory`` in the standard HF layout."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def load_checkpoint(
    directory: Path, *, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Model and tokenizer from a local HF checkpoint directory, in eval mode on ``device``.
    PolicyError naming the directory when it is not a loadable checkpoint."""
    if not (directory / "config.json").is_file():
        raise PolicyError(f"{directory} has no config.json: not a Hugging Face checkpoint")
    try:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
        with MODEL_BUILD_LOCK:
            model = AutoModelForCausalLM.from_pretrained(
                directory, local_files_only=True, dtype=dtype or torch.float32
            )
    except (OSError, ValueError, KeyError) as exc:
        raise PolicyError(f"cannot load the checkpoint in {directory}: {exc}") from exc
    if tokenizer.pad_token is None:  # a foreign checkpoint: pad with eos
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device)  # type: ignore[arg-type]  # transformers types .to's device oddly
    model.eval()  # type: ignore[no-untyped-call]  # untyped in transformers
    return model, tokenizer


def kv_cache_bytes_per_token(config: AgentModelConfig, dtype_bytes: int = 4) -> int:
    """Bytes of KV cache one token takes across all layers: 2 (K and V) x layers x kv_heads x
    head_dim x the element size. GQA divides MHA's by heads / kv_heads."""
    head_dim = config.hidden_size // config.heads
    return 2 * config.layers * config.kv_heads * head_dim * dtype_bytes
