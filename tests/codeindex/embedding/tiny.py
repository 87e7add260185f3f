"""A tiny untrained embedder for unit tests (seconds to build on a CPU)."""

from __future__ import annotations

import torch

from codeindex.embedding.embedder import Embedder, EmbedderManifest
from codeindex.embedding.model import EmbedderConfig, build_encoder
from codeindex.embedding.tokenizer import train_code_tokenizer

CORPUS = [
    "def get_user_name(user): return user.name",
    "def parseHTTPResponse(raw): return Response(raw.split())",
    "Return the name of the user.",
    "class Config: timeout_s = 30",
    "for item in items: total += item.price * item.quantity",
] * 4
CONFIG = EmbedderConfig(
    vocab_size=320, hidden_size=32, layers=1, heads=2, intermediate_size=64, max_tokens=24
)


def tiny_embedder(seed: int = 0) -> Embedder:
    tokenizer = train_code_tokenizer(CORPUS, CONFIG.vocab_size)
    torch.manual_seed(seed)
    model = build_encoder(CONFIG, tokenizer.pad_token_id)
    manifest = EmbedderManifest(
        name="tiny", version="1", dim=CONFIG.hidden_size, max_tokens=CONFIG.max_tokens
    )
    return Embedder(model, tokenizer, manifest, device="cpu")
