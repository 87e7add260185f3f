"""Load an embedder and encode texts with it: ``Embedder.encode(texts) -> float32 [n, dim]``,
rows L2-normalised, so a dot product is the cosine similarity.

An embedder directory is the Hugging Face layout (``config.json``, ``model.safetensors``,
``tokenizer.json`` …) plus ``embedder.json``, the manifest: name, version, dimension, the
recipe's commit, a summary of the training data and the benchmark's metrics. (Not
``manifest.json``: that name is the model registry's file list when the directory is published.)
:func:`load_embedder` also reads any local sentence-embedding checkpoint without the manifest
(an encoder loadable with ``AutoModel``, mean-pooled). Nothing is ever fetched from a hub.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from codeindex.embedding.errors import EmbeddingError
from codeindex.embedding.model import mean_pool
from policies.agent_lm import save_checkpoint
from policies.model_build import MODEL_BUILD_LOCK

MANIFEST_FILE = "embedder.json"
MANIFEST_FORMAT = "flywheel-embedder@1"
ARTIFACT_DIR = Path(__file__).parent / "artifact"  # the shipped one (package data)


@dataclass(frozen=True)
class EmbedderManifest:
    """What an embedder is; ``embedder.json`` in its directory."""

    name: str
    version: str
    dim: int
    max_tokens: int
    recipe_commit: str | None = None  # the repository's commit the recipe ran at
    training: dict[str, Any] = field(default_factory=dict)  # data summary: sources, pairs, steps
    metrics: dict[str, float] = field(default_factory=dict)
    format: str = MANIFEST_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> EmbedderManifest:
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError) as exc:
            raise EmbeddingError(f"cannot read the embedder manifest {path}: {exc}") from exc


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Embedder:
    """A loaded encoder with its tokenizer: texts → unit vectors. bfloat16 on CUDA, float32 on
    the CPU; the vectors are float32 either way."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        manifest: EmbedderManifest,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        self.device = torch.device(device) if device is not None else default_device()
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        # Module.to moves in place; transformers' wrapped PreTrainedModel.to is mistyped
        torch.nn.Module.to(model, device=self.device, dtype=dtype)
        model.eval()  # type: ignore[no-untyped-call]  # untyped in transformers
        self.model = model
        self.tokenizer = tokenizer
        self.manifest = manifest
        self._pad_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else 0

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to the manifest's ``max_tokens``."""
        encoded = self.tokenizer(
            list(texts), truncation=True, max_length=self.manifest.max_tokens, padding=False
        )
        ids: list[list[int]] = encoded["input_ids"]
        return ids

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """float32 [len(texts), dim], each row L2-normalised. Texts are batched by length (sorted
        so a batch pads little) and truncated to ``max_tokens``; rows come back in input order.
        An empty ``texts`` gives [0, dim]."""
        if batch_size < 1:
            raise EmbeddingError(f"batch_size {batch_size} is below 1")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.tokenize(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                input_ids, mask = self.pad([ids[i] for i in rows])
                out[rows] = self.forward(input_ids, mask).cpu().numpy()
        return out

    def pad(self, batch: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ids and their attention mask, [len(batch), longest] on the device."""
        longest = max(1, *(len(ids) for ids in batch))
        input_ids = torch.full((len(batch), longest), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        return input_ids.to(self.device), mask.to(self.device)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The model's pooled, normalised vectors [batch, dim] float32 (with grad when enabled:
        the training recipe calls it too)."""
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        return mean_pool(hidden, mask)

    def save(self, directory: Path, *, half: bool = True) -> None:
        """Write the HF layout and ``embedder.json`` to ``directory``; weights in float16 when
        ``half`` (half the bytes; the loader casts back)."""
        model = copy.deepcopy(self.model)
        torch.nn.Module.to(model, torch.float16 if half else torch.float32)
        save_checkpoint(model, self.tokenizer, directory)  # type: ignore[arg-type]  # any fast tokenizer
        (directory / MANIFEST_FILE).write_text(self.manifest.to_json())


def load_embedder(directory: Path, *, device: torch.device | str | None = None) -> Embedder:
    """The embedder in ``directory``: ours (with ``embedder.json``), or any local HF encoder
    checkpoint with a tokenizer (a sentence-embedding model such as a MiniLM or BGE directory),
    then named after the directory, versioned by its weights' hash and mean-pooled.
    EmbeddingError naming the directory when it cannot be loaded."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise EmbeddingError(
            f"{directory} has no config.json: not a Hugging Face checkpoint; pass a directory "
            "with config.json, the weights and tokenizer files"
        )
    ours = (directory / MANIFEST_FILE).is_file()
    # ours is a BertModel saved without BERT's pooler (mean pooling replaces it)
    extra: dict[str, Any] = {"add_pooling_layer": False} if ours else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        with MODEL_BUILD_LOCK:
            model = AutoModel.from_pretrained(
                directory, local_files_only=True, dtype=torch.float32, **extra
            )
    except (OSError, ValueError, KeyError) as exc:
        raise EmbeddingError(f"cannot load the checkpoint in {directory}: {exc}") from exc
    if ours:
        manifest = EmbedderManifest.read(directory / MANIFEST_FILE)
    else:
        manifest = _foreign_manifest(directory, model, tokenizer)
    if tokenizer.pad_token is None:
        raise EmbeddingError(f"the tokenizer in {directory} has no pad token; set one")
    tokenizer.padding_side = "right"
    return Embedder(model, tokenizer, manifest, device=device)


def load_default_embedder(*, device: torch.device | str | None = None) -> Embedder:
    """The embedder shipped with the package (``codeindex/embedding/artifact/``), built by
    ``flywheel learn --recipe code-embedder``; loads in about a second, trains nothing."""
    return load_embedder(ARTIFACT_DIR, device=device)


def _foreign_manifest(
    directory: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> EmbedderManifest:
    weights = sorted(directory.glob("*.safetensors")) or sorted(directory.glob("*.bin"))
    digest = hashlib.sha256()
    for path in weights:
        digest.update(path.read_bytes())
    positions = getattr(model.config, "max_position_embeddings", 512)
    limit = min(int(tokenizer.model_max_length), int(positions), 512)
    return EmbedderManifest(
        name=directory.resolve().name,
        version=f"local-{digest.hexdigest()[:12]}",
        dim=int(model.config.hidden_size),
        max_tokens=limit,
    )
