"""The code-embedder recipe's config: ``configs/default.yaml``, one frozen dataclass per section."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from codeindex.embedding.model import EmbedderConfig
from learner.config import load_config
from learner.engine.durations import Duration
from learner.errors import LearnerError

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default.yaml"


@dataclass(frozen=True)
class PairsConfig:
    """Which mined (query, code) pairs train the model."""

    # Top-level packages or modules to mine under the stdlib and site-packages (a short run's
    # sources, e.g. ["json", "email"]); empty: all of them.
    packages: tuple[str, ...] = ()
    max_per_package: int = 3000  # the biggest packages (torch, sympy...) would crowd out the rest
    max_pairs: int = 40_000  # a seeded sample of at most this many
    name_query_share: float = 0.2  # share of pairs whose query is the function's name in words
    tokenizer_texts: int = 20_000  # texts the tokenizer is trained on (queries and code)
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.packages, str) or not all(isinstance(p, str) for p in self.packages):
            raise LearnerError(f"pairs.packages must be a list of names, not {self.packages!r}")
        object.__setattr__(self, "packages", tuple(self.packages))  # YAML gives a list
        if not 0.0 <= self.name_query_share <= 1.0:
            raise LearnerError(f"name_query_share {self.name_query_share} is not in [0, 1]")


@dataclass(frozen=True)
class ContrastiveConfig:
    """The contrastive training run (symmetric InfoNCE with in-batch negatives, AdamW)."""

    batch_size: int = 128  # pairs per step; each pair's negatives are the batch's others
    duration: Duration = field(default_factory=lambda: Duration.parse("400ba"))  # ba or s/m/h
    lr: float = 2e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    temperature: float = 0.05
    query_tokens: int = 24  # truncation while training; encode() uses model.max_tokens
    code_tokens: int = 64
    threads: int = 2  # torch CPU threads

    def __post_init__(self) -> None:
        object.__setattr__(self, "duration", Duration.parse(self.duration))
        if self.duration.unit.value not in ("ba", "s", "m", "h"):
            raise LearnerError(
                f"train.duration {self.duration} must be in batches (ba) or wall time (s, m, h)"
            )
        if self.batch_size < 2:
            raise LearnerError("train.batch_size must be at least 2 (in-batch negatives)")


@dataclass(frozen=True)
class CodeEmbedderConfig:
    """Every section of ``learner/recipes/code_embedder/configs/default.yaml``."""

    model_name: str = "code-embedder"
    model: EmbedderConfig = field(default_factory=EmbedderConfig)
    pairs: PairsConfig = field(default_factory=PairsConfig)
    train: ContrastiveConfig = field(default_factory=ContrastiveConfig)
    seed: int = 0

    @classmethod
    def load(cls, path: Path = DEFAULT_CONFIG) -> CodeEmbedderConfig:
        return load_config(cls, path)

    def digest(self) -> str:
        """12 hex of the settings that determine the weights (all but the model's name)."""
        settings = dataclasses.asdict(dataclasses.replace(self, model_name=""))
        if not self.pairs.packages:  # every source, as before the key: earlier digests still hold
            del settings["pairs"]["packages"]
        return hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:12]
